//! The transport ceiling of `compare`: a gRPC echo server and its writer.
//!
//! The server answers every message of a bidirectional stream with the same
//! message, straight from the request stream (no task, no channel, no
//! consensus, no disk). A level against it runs the same load generator,
//! writers, connections and value size as against Keel, so its ops/s is
//! what gRPC over loopback allows on this machine at that concurrency: an
//! upper bound for any gRPC server here, Keel's included.

use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

use crate::load::Writer;

#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("keel.bench.v1");
}

use pb::echo_service_client::EchoServiceClient;
use pb::echo_service_server::{EchoService, EchoServiceServer};
use pb::EchoMessage;

/// Hidden `keel` subcommand that runs the server (see `keel-cli`).
pub const SERVER_SUBCOMMAND: &str = "bench-echo-server";
/// First line the server prints on stdout, followed by its address.
pub const LISTENING: &str = "listening on ";

struct Echo;

#[tonic::async_trait]
impl EchoService for Echo {
    type EchoStream = Pin<Box<dyn Stream<Item = Result<EchoMessage, Status>> + Send>>;

    async fn echo(
        &self,
        request: Request<Streaming<EchoMessage>>,
    ) -> Result<Response<Self::EchoStream>, Status> {
        // The response stream is the request stream: each message goes
        // back as it is decoded, and the call ends when the client's does.
        Ok(Response::new(Box::pin(request.into_inner())))
    }
}

/// Serves the echo service on `listener` (no Nagle, as the controllers)
/// until the process ends.
pub async fn serve(listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    tonic::transport::Server::builder()
        .add_service(EchoServiceServer::new(Echo))
        .serve_with_incoming(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await
        .context("echo server stopped")
}

/// Longest wait for a started echo server to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// An echo server process (the running binary's hidden subcommand),
/// killed on drop.
pub struct EchoServer {
    child: Child,
    /// Its process id, as a one-server list (the CPU accounting sums over
    /// a system's server pids).
    pid: [u32; 1],
    /// `host:port` it listens on.
    pub addr: String,
}

impl EchoServer {
    /// Starts `exe bench-echo-server --listen <ip>:0` and reads the address
    /// it bound from its first line of output (waiting at most
    /// [`START_TIMEOUT`]).
    pub fn start(exe: &std::path::Path, ip: std::net::Ipv4Addr) -> anyhow::Result<Self> {
        let mut child = Command::new(exe)
            .args([SERVER_SUBCOMMAND, "--listen", &format!("{ip}:0")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {} {SERVER_SUBCOMMAND}", exe.display()))?;
        let out = child.stdout.take();
        // From here on an error drops the server, which kills the child.
        let mut server = EchoServer {
            pid: [child.id()],
            child,
            addr: String::new(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(out) = out {
            std::thread::spawn(move || {
                let mut line = String::new();
                let read =
                    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
                let _ = tx.send(read.map(|_| line));
            });
        }
        let line = rx
            .recv_timeout(START_TIMEOUT)
            .map_err(|_| {
                anyhow::anyhow!("echo server printed no address within {START_TIMEOUT:?}")
            })?
            .context("echo server output")?;
        let addr: SocketAddr = line
            .trim()
            .strip_prefix(LISTENING)
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("echo server printed {line:?}, not its address"))?;
        server.addr = addr.to_string();
        Ok(server)
    }

    /// Its process id, as the list of the system's server pids.
    pub fn pids(&self) -> &[u32] {
        &self.pid
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One writer: its own echo stream on `channel` (its own connection, or one
/// shared with the other writers), one message in flight.
pub struct EchoWriter {
    tx: mpsc::Sender<EchoMessage>,
    replies: Streaming<EchoMessage>,
    value_bytes: usize,
    timeout: Duration,
}

impl EchoWriter {
    /// Opens the stream.
    pub async fn open(
        channel: Channel,
        value_bytes: usize,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel(1);
        let replies = EchoServiceClient::new(channel)
            .echo(ReceiverStream::new(rx))
            .await
            .context("cannot open an echo stream")?
            .into_inner();
        Ok(EchoWriter {
            tx,
            replies,
            value_bytes,
            timeout,
        })
    }

    /// Sends one message and waits for it to come back.
    pub async fn round_trip(&mut self, id: u64, value: Vec<u8>) -> Result<(), String> {
        self.tx
            .send(EchoMessage { id, value })
            .await
            .map_err(|_| "echo stream closed".to_string())?;
        match tokio::time::timeout(self.timeout, self.replies.next()).await {
            Err(_) => Err(format!("no echo within {:?}", self.timeout)),
            Ok(None) => Err("echo stream ended".into()),
            Ok(Some(Err(s))) => Err(format!("echo failed: {s}")),
            Ok(Some(Ok(m))) if m.id != id => Err(format!("echo of {} came back as {}", id, m.id)),
            Ok(Some(Ok(_))) => Ok(()),
        }
    }
}

impl Writer for EchoWriter {
    async fn op(&mut self, writer: usize, seq: u64) -> Result<(), String> {
        let v = crate::cluster::value(writer, seq, self.value_bytes).into_bytes();
        self.round_trip(seq, v).await
    }

    async fn finish(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn local_server() -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        tokio::spawn(serve(l));
        addr
    }

    #[tokio::test]
    async fn every_message_comes_back_in_order_on_its_own_stream() {
        let addr = local_server().await;
        let ch = crate::cluster::connect(&addr, Duration::from_secs(10))
            .await
            .expect("channel");
        let timeout = Duration::from_secs(10);
        // Two writers sharing one connection, each on its own stream.
        let mut a = EchoWriter::open(ch.clone(), 100, timeout).await.expect("a");
        let mut b = EchoWriter::open(ch, 100, timeout).await.expect("b");
        for seq in 0..50 {
            a.op(0, seq).await.expect("a echo");
            b.op(1, seq).await.expect("b echo");
        }
        // The writer checks what comes back: a reply with another id is an
        // error, not a success.
        a.tx.send(EchoMessage {
            id: 7,
            value: vec![1],
        })
        .await
        .expect("send");
        assert!(a.round_trip(8, vec![2]).await.is_err());
    }

    /// A level against the echo server opens a connection per writer, or
    /// one for all with `Shared`, and every op of either comes back.
    #[tokio::test]
    async fn a_level_opens_one_connection_per_writer_or_one_shared() {
        use crate::load::{run_writers_on, Connections};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let addr = local_server().await;
        let timeout = Duration::from_secs(10);
        for (mode, opened) in [(Connections::PerWriter, 3), (Connections::Shared, 1)] {
            let opens = AtomicUsize::new(0);
            // Bounded by the op budget (10 per writer), not by the clock.
            let level = run_writers_on(
                "grpc-echo",
                mode,
                3,
                60.0,
                30,
                || {
                    opens.fetch_add(1, Ordering::Relaxed);
                    crate::cluster::connect(&addr, timeout)
                },
                |ch| EchoWriter::open(ch, 100, timeout),
            )
            .await
            .expect("level runs");
            assert_eq!(opens.load(Ordering::Relaxed), opened, "{mode:?}");
            assert_eq!((level.ops, level.errors), (30, 0), "{mode:?}");
        }
    }
}
