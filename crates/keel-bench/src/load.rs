//! The closed-loop load generator every write benchmark uses: `writers`
//! tasks, each with its own connection and one op in flight, started
//! together and run for a wall time (or an op budget), recording the
//! latency of every successful op.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::Barrier;

use crate::progress;

/// A writer stops after this many failed ops.
pub(crate) const MAX_ERRORS_PER_WRITER: u64 = 100;

/// How a level's writers reach the system.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Connections {
    /// Each writer opens its own connection (and session).
    #[default]
    PerWriter,
    /// All writers share one connection (one ZooKeeper session, one gRPC
    /// channel, one Keel write session): their requests are multiplexed
    /// and travel together.
    Shared,
}

impl Connections {
    pub fn name(self) -> &'static str {
        match self {
            Connections::PerWriter => "per-writer",
            Connections::Shared => "shared",
        }
    }
}

/// One connection of a system under load, one op in flight.
pub(crate) trait Writer: Send + 'static {
    /// One durable write; `Err` carries the error text.
    fn op(&mut self, writer: usize, seq: u64) -> impl Future<Output = Result<(), String>> + Send;
    /// Releases server-side state (outside the timed part).
    fn finish(self) -> impl Future<Output = ()> + Send;
}

/// What one level of load measured.
pub(crate) struct Level {
    pub writers: usize,
    /// Successful ops.
    pub ops: u64,
    pub errors: u64,
    pub secs: f64,
    /// Latency of every successful op.
    pub lat_ms: Vec<f64>,
    /// Text of the first failed op, if any.
    pub first_error: Option<String>,
}

/// [`run_writers`] for a system whose connection can be cloned: each writer
/// opens its own with `open`, or, with [`Connections::Shared`], every writer
/// takes a clone of one opened first; `make` turns a connection into the
/// writer.
pub(crate) async fn run_writers_on<Conn, W, O, OF, M, MF>(
    system: &str,
    connections: Connections,
    writers: usize,
    secs: f64,
    max_ops: u64,
    open: O,
    make: M,
) -> anyhow::Result<Level>
where
    Conn: Clone,
    W: Writer,
    O: Fn() -> OF,
    OF: Future<Output = anyhow::Result<Conn>>,
    M: Fn(Conn) -> MF,
    MF: Future<Output = anyhow::Result<W>>,
{
    let shared = match connections {
        Connections::PerWriter => None,
        Connections::Shared => Some(open().await?),
    };
    let (open, make) = (&open, &make);
    run_writers(system, writers, secs, max_ops, |_| {
        let shared = shared.clone();
        async move {
            let conn = match shared {
                Some(c) => c,
                None => open().await?,
            };
            make(conn).await
        }
    })
    .await
}

/// Runs `writers` writers, each made by `connect(writer)`, for `secs` (or
/// `max_ops` in all); `system` names them in messages.
pub(crate) async fn run_writers<W, C, F>(
    system: &str,
    writers: usize,
    secs: f64,
    max_ops: u64,
    connect: C,
) -> anyhow::Result<Level>
where
    W: Writer,
    C: Fn(usize) -> F,
    F: Future<Output = anyhow::Result<W>>,
{
    // Every writer connects before any starts: a failed connection closes
    // the ones already made (ZooKeeper sessions, say) instead of leaving
    // their tasks waiting for a start that never comes.
    let mut conns = Vec::with_capacity(writers);
    for w in 0..writers {
        match connect(w).await {
            Ok(c) => conns.push(c),
            Err(e) => {
                for c in conns {
                    c.finish().await;
                }
                return Err(e).with_context(|| format!("connect {system} writer {w}"));
            }
        }
    }
    let barrier = Arc::new(Barrier::new(writers + 1));
    let per_writer = (max_ops / writers as u64).max(1);
    let mut tasks = Vec::new();
    for (w, mut conn) in conns.into_iter().enumerate() {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut first_error = None;
            barrier.wait().await;
            let stop = Instant::now() + Duration::from_secs_f64(secs);
            let mut seq = 0u64;
            while Instant::now() < stop && seq < per_writer {
                let t = Instant::now();
                let r = conn.op(w, seq).await;
                seq += 1;
                match r {
                    Ok(()) => lat.push(t.elapsed().as_secs_f64() * 1000.0),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
                if errors > MAX_ERRORS_PER_WRITER {
                    break;
                }
            }
            (lat, errors, first_error, conn)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut level = Level {
        writers,
        ops: 0,
        errors: 0,
        secs: 0.0,
        lat_ms: Vec::new(),
        first_error: None,
    };
    let mut conns = Vec::new();
    for t in tasks {
        let (lat, errors, fe, conn) = t.await?;
        level.ops += lat.len() as u64;
        level.errors += errors;
        level.lat_ms.extend(lat);
        if level.first_error.is_none() {
            level.first_error = fe;
        }
        conns.push(conn);
    }
    level.secs = start.elapsed().as_secs_f64();
    for c in conns {
        c.finish().await;
    }
    if level.errors > 0 {
        progress!(
            "{} failed {system} ops at {writers} writers; first: {}",
            level.errors,
            level.first_error.as_deref().unwrap_or_default()
        );
    }
    if level.ops == 0 {
        anyhow::bail!("no {system} op succeeded at {writers} writers");
    }
    Ok(level)
}
