//! The `flood` attack: every few rounds, silent TCP connections (no TLS
//! ClientHello, not one byte) from an address of the intruder's own to the
//! active controller's listener, held open. Each listener must close them
//! (its handshake timeout, its per-address limit) instead of keeping room
//! for them, and meanwhile a fresh admin request from another address must
//! still be answered: a flood from outside may not cut anyone else off.
//! One attempt per flood: `refused` when the listener closed every silent
//! connection within [`FLOOD_BOUND`], `accepted` (a violation) when one was
//! still open after it, `errored` when none could be opened (a partition).
//! Its detail says whether the admin request was answered during the
//! flood; the checker needs at least one flood whose admin request was.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::{Answer, Attempt, Credential, Intruder};
use crate::client;

/// The address the silent connections come from: none of the cluster's,
/// nor the clients'.
pub const FLOOD_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 2, 66);
/// Silent connections per flood.
pub const FLOOD_CONNECTIONS: usize = 64;
/// A flood every this many rounds.
pub const FLOOD_EVERY: u32 = 5;
/// How long the listener may keep a silent connection: its handshake
/// timeout with room for a loaded host.
pub const FLOOD_BOUND: Duration = Duration::from_secs(20);
/// The admin request's own bound, during the flood.
const ADMIN_BOUND: Duration = Duration::from_secs(5);
/// The detail of a flood attempt whose admin request was answered.
pub const ADMIN_ANSWERED: &str = "admin answered during the flood";

/// Opens a connection from `FLOOD_IP` that never says anything.
async fn silent(to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(FLOOD_IP), 0))?;
    tokio::time::timeout(Duration::from_secs(2), socket.connect(to))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))?
}

/// Waits until the server closes `s` (end of stream or an error); false
/// if it was still open at `deadline`.
async fn closed_by(mut s: tokio::net::TcpStream, deadline: tokio::time::Instant) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // A TLS alert or the like: the server spoke; wait for the close.
            Ok(Ok(_)) => {}
        }
    }
}

impl Intruder {
    /// Starts a flood on the active controller `active` when this round
    /// has one; it runs on its own task and records its attempt when done.
    pub(super) fn flood(&self, round: u32, active: &str) {
        if round % FLOOD_EVERY != FLOOD_EVERY - 1 {
            return;
        }
        let Ok(to) = active.parse::<SocketAddr>() else {
            return;
        };
        let (attempts, admin, start, active) = (
            self.attempts.clone(),
            self.admin.clone(),
            self.start,
            active.to_string(),
        );
        tokio::spawn(async move {
            let at_ms = start.elapsed().as_secs_f64() * 1000.0;
            let mut held = Vec::new();
            let mut failed = None;
            for _ in 0..FLOOD_CONNECTIONS {
                match silent(to).await {
                    Ok(s) => held.push(s),
                    Err(e) => failed = Some(e.to_string()),
                }
            }
            let opened = held.len();
            let deadline = tokio::time::Instant::now() + FLOOD_BOUND;
            let mut closes = tokio::task::JoinSet::new();
            for s in held {
                closes.spawn(closed_by(s, deadline));
            }
            // The cluster's own door, from the admin's address, meanwhile.
            let asked = Instant::now();
            let admin_answer = match client::describe_cluster(&admin, &active, ADMIN_BOUND).await {
                Some(_) => format!("{ADMIN_ANSWERED} ({} ms)", asked.elapsed().as_millis()),
                None => "admin not answered during the flood".to_string(),
            };
            let closed = closes.join_all().await.into_iter().filter(|c| *c).count();
            let answer = if opened == 0 {
                Answer::Errored
            } else if closed == opened {
                Answer::Refused
            } else {
                Answer::Accepted
            };
            let detail = format!(
                "{opened} of {FLOOD_CONNECTIONS} silent connections opened{}, {closed} closed by the listener within {FLOOD_BOUND:?}; {admin_answer}",
                failed.map(|e| format!(" (last failure: {e})")).unwrap_or_default()
            );
            attempts.lock().unwrap().push(Attempt {
                at_ms,
                credential: Credential::Flood,
                identity: format!("none, from {FLOOD_IP}"),
                request: "SilentConnections".into(),
                target: format!("controller listener {active}"),
                node: active,
                answer,
                detail,
            });
        });
    }
}
