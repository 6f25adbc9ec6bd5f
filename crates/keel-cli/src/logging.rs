//! tracing setup shared by the long-running subcommands.

use tracing_subscriber::EnvFilter;

/// `text` (human) or `json` (one object per line).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber; `RUST_LOG` overrides the default filter.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,openraft=warn,sled=warn,h2=warn,tower=warn,hyper=warn")
    });
    // Colours only on a terminal: `keel dev`, systemd and the test kits
    // send stderr to log files, where escape codes are noise.
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Bucket bounds (seconds) of every latency histogram: 100 µs to 30 s.
/// Real histograms, so any quantile over any window can be computed by
/// Prometheus (a summary's quantiles decay to 0 between events).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Period of the metrics recorder's upkeep (drains histogram samples that
/// no scrape collected).
const METRICS_UPKEEP: std::time::Duration = std::time::Duration::from_secs(5);

/// Binds the HTTP endpoint at `addr` and installs the Prometheus recorder
/// it serves; the caller serves it once the node's connection gate exists.
pub async fn metrics_endpoint(
    addr: std::net::SocketAddr,
) -> anyhow::Result<(
    tokio::net::TcpListener,
    keel_controller::console::RenderMetrics,
)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot serve HTTP on {addr}: {e}"))?;
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS)
        .map_err(|e| anyhow::anyhow!("metric buckets: {e}"))?
        .install_recorder()
        .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(METRICS_UPKEEP);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok((listener, std::sync::Arc::new(move || handle.render())))
}

/// Serves Prometheus text at `/metrics` on `listener`, each connection
/// admitted by `gate` (as the node's other listeners) and closed once idle
/// for `idle`, until `stop`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    gate: &std::sync::Arc<keel_tls::admission::Gate>,
    idle: std::time::Duration,
    render: keel_controller::console::RenderMetrics,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let render = render.clone();
            async move {
                let text = tokio::task::spawn_blocking(move || render())
                    .await
                    .unwrap_or_default();
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    text,
                )
            }
        }),
    );
    let listener = keel_controller::console::AdmittedListener {
        listener,
        door: keel_tls::admission::Door::new(gate, "http").with_idle_timeout(idle),
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|v| *v).await;
        })
        .await
}

/// `keel_build_info{version, revision, role} 1`: the release and, as
/// Prometheus's own build_info names it, the git commit.
pub fn build_info(role: &'static str) {
    metrics::gauge!(
        "keel_build_info",
        "version" => env!("CARGO_PKG_VERSION"),
        "revision" => env!("KEEL_GIT_COMMIT"),
        "role" => role
    )
    .set(1.0);
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops this process");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Set by whoever starts a node and wants no node to outlive it (the
/// cluster kit: `keel dev`, the tests, the bench and the fault harness).
pub const EXIT_WITH_PARENT_ENV: &str = "KEEL_EXIT_WITH_PARENT";

/// With [`EXIT_WITH_PARENT_ENV`] set, a thread watches the process's
/// parent: once it is gone (the process was handed to another parent, as
/// when `keel dev` is SIGKILLed or its terminal closes), the node stops in
/// order (SIGTERM to itself), and exits anyway 15 s later if that hangs.
/// A thread rather than `PR_SET_PDEATHSIG`, which fires when the thread
/// that started the node exits, not its process.
pub fn exit_with_parent() {
    if std::env::var_os(EXIT_WITH_PARENT_ENV).is_none() {
        return;
    }
    // SAFETY: getppid has no preconditions and cannot fail.
    let parent = unsafe { libc::getppid() };
    let watch = move || loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        // SAFETY: as above.
        if unsafe { libc::getppid() } == parent {
            continue;
        }
        tracing::warn!(
            parent,
            "the process that started this node is gone; stopping"
        );
        // SAFETY: a signal to this very process, whose handlers stop it in
        // order.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        std::thread::sleep(std::time::Duration::from_secs(15));
        tracing::error!("still running 15 s after its parent went; exiting");
        std::process::exit(1);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(watch)
    {
        tracing::warn!(error = %e, "cannot watch the parent process");
    }
}

/// The longest a node's orderly shutdown may take before it exits anyway.
pub const SHUTDOWN_BOUND: std::time::Duration = std::time::Duration::from_secs(15);

/// Called when a node starts to stop: a thread that, if the process is
/// still here after `bound` (its shutdown or a drop hangs, e.g. on a disk
/// that never answers), exits with [`crate::EXIT_STUCK`]. A node that is
/// stuck is worse than one that exits: its supervisor never restarts it
/// and it holds its port.
pub fn exit_if_stuck(why: &'static str, bound: std::time::Duration) {
    let watch = move || {
        std::thread::sleep(bound);
        tracing::error!(
            reason = why,
            bound_s = bound.as_secs(),
            "shutdown did not finish; exiting anyway"
        );
        eprintln!(
            "error: shutdown ({why}) did not finish within {} s; exiting",
            bound.as_secs()
        );
        std::process::exit(i32::from(crate::EXIT_STUCK));
    };
    if let Err(e) = std::thread::Builder::new()
        .name("shutdown-watch".into())
        .spawn(watch)
    {
        tracing::warn!(error = %e, "cannot bound the shutdown");
    }
}

/// Exits the process with [`crate::EXIT_STALLED`] once a storage call has
/// run for `bound_ms` (`keel_raft::stall`): a disk that never answers leaves
/// the call, and with it the node, waiting for ever; exiting lets its
/// supervisor restart it. The exit comes from the watcher's own thread;
/// no orderly shutdown is tried, as it would wait on the same disk. 0: off.
pub fn exit_if_storage_stalls(bound_ms: u64) {
    if bound_ms == 0 {
        return;
    }
    let bound = std::time::Duration::from_millis(bound_ms);
    let exit = move |stall: keel_raft::stall::Stall| {
        tracing::error!(
            call = stall.op.describe(),
            running_s = stall.for_at_least.as_secs(),
            bound_ms,
            "storage stalled: a storage call has not returned; exiting"
        );
        eprintln!(
            "error: storage stalled: {} has not returned for {} s (--storage-stall-timeout-ms {bound_ms}); exiting",
            stall.op.describe(),
            stall.for_at_least.as_secs()
        );
        std::process::exit(i32::from(crate::EXIT_STALLED));
    };
    if let Err(e) = keel_raft::stall::watch(bound, exit) {
        tracing::warn!(error = %e, "cannot watch for storage stalls");
    }
}

/// Raises the process's open-file limit (soft) to its hard limit
/// ([`keel_tls::admission::raise_open_files`]); logs the outcome and
/// returns the soft limit now in force (`None`: it cannot be read).
pub fn raise_fd_limit() -> Option<u64> {
    match keel_tls::admission::raise_open_files(None) {
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit");
            None
        }
        Ok(f) if f.now > f.before => {
            tracing::info!(from = f.before, to = f.now, "raised the open-file limit");
            Some(f.now)
        }
        Ok(f) if f.now < f.hard => {
            tracing::warn!(
                limit = f.now,
                hard = f.hard,
                "cannot raise the open-file limit"
            );
            Some(f.now)
        }
        Ok(f) => {
            tracing::info!(limit = f.now, "open-file limit");
            Some(f.now)
        }
    }
}
