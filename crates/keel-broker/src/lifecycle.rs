//! Registration, heartbeats and the session watchdog: the broker's half of
//! Kafka's KRaft broker lifecycle.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_metadata::{BrokerEpoch, ControllerEpoch, ErrorCode};
use keel_proto::backoff::Backoff;
use keel_proto::{convert, pb};
use keel_raft::stall::{timed, StorageOp};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::metrics;
use crate::shared::{lock, now_ms, Shared};
use crate::BrokerError;

/// First retry delay of registration and heartbeats; delays double up to
/// `RETRY_CAP` (each actual delay between half and all of it).
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_CAP: Duration = Duration::from_secs(1);

enum Flow {
    /// Go on to the next phase.
    Continue,
    /// Shutdown requested.
    Stop,
}

/// Registers, heartbeats, re-registers when the registration is lost, until
/// stopped. Returns an error only for faults retrying cannot fix.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BrokerError> {
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    loop {
        if let Flow::Stop = register(&shared, &mut stop, &mut backoff).await? {
            return Ok(());
        }
        if let Flow::Stop = heartbeat(&shared, &mut stop).await {
            return Ok(());
        }
    }
}

/// Sleeps, or returns true if shutdown was requested meanwhile.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

async fn register(
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
    backoff: &mut Backoff,
) -> Result<Flow, BrokerError> {
    let cfg = &shared.config;
    loop {
        if *stop.borrow() {
            return Ok(Flow::Stop);
        }
        let previous = lock(&shared.data_dir).last_broker_epoch();
        let req = pb::RegisterBrokerRequest {
            broker_id: cfg.broker_id,
            incarnation_id: shared.incarnation.to_bytes().to_vec(),
            cluster_id: cfg.cluster_id.clone(),
            address: shared.address.to_string(),
            rack: cfg.rack.clone(),
            log_dirs: cfg.log_dirs.clone(),
            previous_broker_epoch: previous.0,
            kafka_address: shared.kafka_address.map(|a| a.to_string()),
        };
        let (addr, client) = shared.controller();
        let delay = match client {
            None => {
                warn!(%addr, "controller address does not parse; skipping it");
                lock(&shared.link).rotate();
                backoff.step()
            }
            Some(mut client) => match client.register_broker(req).await {
                Ok(resp) => {
                    let resp = resp.into_inner();
                    match convert::check(&resp.error).map_err(|e| (e.code, e.message)) {
                        Ok(()) => {
                            let epoch = BrokerEpoch(resp.broker_epoch);
                            lock(&shared.data_dir).set_last_broker_epoch(epoch)?;
                            shared.adopt_session_timeout(resp.session_timeout_ms);
                            let controller = (resp.controller_epoch > 0).then_some((
                                resp.controller_id,
                                ControllerEpoch(resp.controller_epoch),
                            ));
                            let mut st = shared.state();
                            st.on_registered(epoch, controller, now_ms());
                            st.publish_gauges();
                            drop(st);
                            ::metrics::counter!(metrics::REGISTRATIONS).increment(1);
                            backoff.reset();
                            return Ok(Flow::Continue);
                        }
                        Err((ErrorCode::NotController, _)) => {
                            lock(&shared.link)
                                .follow(resp.error.as_ref().and_then(|e| e.leader.as_ref()));
                            backoff.step()
                        }
                        Err((ErrorCode::InconsistentClusterId, reason)) => {
                            let msg = format!("broker cluster id {:?}: {reason}", cfg.cluster_id);
                            error!(%addr, reason = %msg, "registration refused: inconsistent cluster id; stopping");
                            return Err(BrokerError::InconsistentClusterId(msg));
                        }
                        Err((ErrorCode::DuplicateBrokerRegistration, reason)) => {
                            error!(
                                %addr,
                                broker = cfg.broker_id,
                                incarnation = %shared.incarnation,
                                reason = reason.as_str(),
                                "registration refused: another incarnation of this broker id holds a live session; retrying"
                            );
                            backoff.step()
                        }
                        Err((code, reason)) => {
                            warn!(%addr, %code, reason = reason.as_str(), "registration refused; retrying");
                            backoff.step()
                        }
                    }
                }
                Err(status) => {
                    debug!(%addr, error = %status.message(), "registration call failed");
                    lock(&shared.link).rotate();
                    backoff.step()
                }
            },
        };
        if sleep_or_stop(delay, stop).await {
            return Ok(Flow::Stop);
        }
    }
}

/// Logs a change in which log dirs are offline (`offline` now,
/// `offline_before` at the last heartbeat, which it becomes).
fn note_offline_change(offline: &[String], offline_before: &mut Vec<String>) {
    if offline != offline_before.as_slice() {
        if offline.is_empty() {
            info!("all log dirs online");
        } else {
            warn!(dirs = ?offline, "log dirs offline");
        }
        *offline_before = offline.to_vec();
    }
}

/// The heartbeat of this broker's session in `epoch`, at metadata
/// `metadata_offset`, with its `offline` log dirs and its disks' space.
fn heartbeat_request(
    shared: &Shared,
    epoch: BrokerEpoch,
    metadata_offset: u64,
    offline: Vec<String>,
) -> pb::BrokerHeartbeatRequest {
    let cfg = &shared.config;
    pb::BrokerHeartbeatRequest {
        broker_id: cfg.broker_id,
        broker_epoch: epoch.0,
        current_metadata_offset: metadata_offset,
        want_fence: false,
        want_shutdown: shared.want_shutdown.load(Ordering::SeqCst),
        offline_log_dirs: offline,
        disks: disk_spaces(&cfg.data_dir, &cfg.log_dirs),
        software_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// Takes a heartbeat answer without error into the broker's state (and
/// its gauges), and notes a controlled shutdown allowed. False when the
/// session in `epoch` is gone: register again.
fn accept_heartbeat_answer(
    shared: &Shared,
    epoch: BrokerEpoch,
    resp: &pb::BrokerHeartbeatResponse,
) -> bool {
    shared.access.want(resp.access_version);
    let reply = convert::heartbeat_reply_from_pb(resp);
    let controller_epoch = ControllerEpoch(resp.controller_epoch);
    let mut st = shared.state();
    if !st.on_heartbeat(
        epoch,
        &reply,
        resp.controller_id,
        controller_epoch,
        now_ms(),
    ) {
        return false;
    }
    st.publish_gauges();
    drop(st);
    if resp.should_shut_down {
        shared.shutdown_allowed.send_replace(true);
    }
    true
}

async fn heartbeat(shared: &Shared, stop: &mut watch::Receiver<bool>) -> Flow {
    let cfg = &shared.config;
    let interval = Duration::from_millis(cfg.heartbeat_interval_ms);
    let mut retry = Backoff::new(RETRY_FIRST, RETRY_CAP);
    let mut delay = Duration::ZERO;
    let mut offline_before: Vec<String> = Vec::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shared.poke.notified() => {}
            _ = stop.wait_for(|s| *s) => return Flow::Stop,
        }
        let offline = offline_log_dirs(&cfg.log_dirs);
        note_offline_change(&offline, &mut offline_before);
        let (epoch, metadata_offset) = {
            let mut st = shared.state();
            st.set_offline_log_dirs(offline.clone());
            match st.broker_epoch() {
                Some(e) => (e, st.metadata().offset()),
                // The watchdog gave the session up: register again.
                None => return Flow::Continue,
            }
        };
        let req = heartbeat_request(shared, epoch, metadata_offset, offline);
        let (addr, client) = shared.controller();
        let Some(mut client) = client else {
            lock(&shared.link).rotate();
            delay = retry.step().min(interval);
            continue;
        };
        let started = Instant::now();
        match client.broker_heartbeat(req).await {
            Ok(resp) => {
                let resp = resp.into_inner();
                ::metrics::histogram!(metrics::HEARTBEAT_LATENCY)
                    .record(started.elapsed().as_secs_f64());
                match convert::check(&resp.error).map_err(|e| (e.code, e.message)) {
                    Ok(()) => {
                        if !accept_heartbeat_answer(shared, epoch, &resp) {
                            return Flow::Continue;
                        }
                        retry.reset();
                        delay = if shared.want_shutdown.load(Ordering::SeqCst)
                            && !resp.should_shut_down
                        {
                            // Shutting down and not yet allowed: ask again
                            // soon, as the brokers stopping beside it mark
                            // themselves (a whole heartbeat interval per
                            // step made a Ctrl-C of `keel dev` take seconds).
                            interval.min(SHUTDOWN_POLL)
                        } else {
                            interval
                        };
                    }
                    Err((ErrorCode::NotController, _)) => {
                        lock(&shared.link)
                            .follow(resp.error.as_ref().and_then(|e| e.leader.as_ref()));
                        // Promptly: the session clock is running.
                        delay = retry.step().min(interval);
                    }
                    Err((code @ (ErrorCode::StaleBrokerEpoch | ErrorCode::UnknownBroker), _)) => {
                        shared.state().drop_registration(code.name());
                        return Flow::Continue;
                    }
                    Err((code, reason)) => {
                        warn!(%addr, %code, reason = reason.as_str(), "heartbeat refused");
                        delay = interval;
                    }
                }
            }
            Err(status) => {
                debug!(%addr, error = %status.message(), "heartbeat failed");
                lock(&shared.link).rotate();
                delay = retry.step().min(interval);
            }
        }
    }
}

/// How often a broker waiting for its controlled shutdown asks again (at
/// most: never more slowly than its heartbeat interval).
const SHUTDOWN_POLL: Duration = Duration::from_millis(100);

/// Gives the session up once no heartbeat was answered for a whole session
/// timeout: the controller has fenced us (or will), so leading on would
/// risk two leaders.
pub(crate) async fn run_watchdog(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        // The controllers' timeout once registration said it.
        let timeout_ms = shared.session_timeout_ms();
        let period = Duration::from_millis((timeout_ms / 10).clamp(10, 100));
        if sleep_or_stop(period, &mut stop).await {
            return;
        }
        let now = now_ms();
        let mut st = shared.state();
        if st.session_expired(now, timeout_ms) {
            warn!(
                broker = shared.id.0,
                silent_ms = st.session().silent_ms(now),
                "session lost: no heartbeat answer within the session timeout"
            );
            ::metrics::counter!(metrics::SESSIONS_LOST).increment(1);
            st.drop_registration("session timeout");
        }
    }
}

/// Log dirs that are missing or not writable (a probe file is created and
/// removed in each).
/// Free and total bytes of the file systems of the data dir and each log
/// dir (a dir that cannot be measured is left out; it shows up as offline),
/// also set as gauges labelled `path`.
pub(crate) fn disk_spaces(data_dir: &Path, log_dirs: &[String]) -> Vec<pb::DiskSpace> {
    std::iter::once(data_dir.to_path_buf())
        .chain(log_dirs.iter().map(std::path::PathBuf::from))
        .filter_map(|dir| {
            let _timed = timed(StorageOp::FreeSpace);
            let free = fs2::available_space(&dir).ok()?;
            let total = fs2::total_space(&dir).ok()?;
            let path = dir.display().to_string();
            ::metrics::gauge!(metrics::DISK_FREE, "path" => path.clone()).set(free as f64);
            ::metrics::gauge!(metrics::DISK_TOTAL, "path" => path.clone()).set(total as f64);
            Some(pb::DiskSpace {
                free_bytes: free,
                total_bytes: total,
                reserve_bytes: 0,
                path,
            })
        })
        .collect()
}

pub(crate) fn offline_log_dirs(dirs: &[String]) -> Vec<String> {
    dirs.iter()
        .filter(|d| {
            let _timed = timed(StorageOp::LogDirProbe);
            let probe = Path::new(d.as_str()).join(".keel-probe");
            let ok = std::fs::write(&probe, b"probe").and_then(|()| std::fs::remove_file(&probe));
            ok.is_err()
        })
        .cloned()
        .collect()
}
