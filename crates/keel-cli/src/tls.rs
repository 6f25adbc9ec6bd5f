//! The TLS options every process takes (`--tls-cert`, `--tls-key`,
//! `--tls-ca`, `--allow-plaintext`, or `KEEL_TLS_*`), turned into a
//! [`Transport`]; and the watch on a node's certificate (re-read on
//! SIGHUP, its expiry exported and warned of).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use keel_tls::{Identity, Role, TlsContext, TlsFiles, Transport};

/// Why a node without TLS settings does not start.
pub const NO_TLS: &str = "no TLS settings: give --tls-cert, --tls-key and --tls-ca (`keel certs init` makes them), or --allow-plaintext to run without encryption or identities";

/// Mutual TLS options, on every node and admin command (global: they may
/// follow a subcommand). The three files go together.
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// This process's certificate (PEM), naming keel://<cluster>/<role>/<name>.
    #[arg(long, env = "KEEL_TLS_CERT", global = true)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "KEEL_TLS_KEY", global = true)]
    pub tls_key: Option<PathBuf>,
    /// The cluster CA certificate (PEM) that peers' certificates must chain to.
    #[arg(long, env = "KEEL_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// Speak plaintext (no TLS options given): no encryption, no identities.
    /// A controller or broker given neither this nor the TLS files refuses
    /// to start.
    #[arg(long, env = "KEEL_ALLOW_PLAINTEXT", global = true)]
    pub allow_plaintext: bool,
}

/// The same options as keys of a TOML file.
#[derive(serde::Deserialize, Debug, Default, Clone)]
pub struct TlsKeys {
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub allow_plaintext: Option<bool>,
}

impl TlsArgs {
    /// The files named by flags (or the environment), else by `file`;
    /// `None` when none is named at all.
    pub fn files(&self, file: &TlsKeys) -> Result<Option<TlsFiles>, String> {
        let cert = self.tls_cert.clone().or_else(|| file.tls_cert.clone());
        let key = self.tls_key.clone().or_else(|| file.tls_key.clone());
        let ca = self.tls_ca.clone().or_else(|| file.tls_ca.clone());
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(TlsFiles { cert, key, ca })),
            _ => {
                Err("--tls-cert, --tls-key and --tls-ca go together: give all three or none".into())
            }
        }
    }

    /// Whether plaintext was asked for.
    pub fn plaintext(&self, file: &TlsKeys) -> bool {
        self.allow_plaintext || file.allow_plaintext.unwrap_or(false)
    }

    /// The transport of a node (controller or broker): as
    /// [`TlsArgs::transport`], but a node given neither TLS files nor
    /// `--allow-plaintext` refuses to start (secure by default), with one
    /// line that says what to do.
    pub fn node_transport(
        &self,
        file: &TlsKeys,
        cluster_id: Option<&str>,
        expected: Option<&Identity>,
    ) -> Result<Transport, String> {
        if self.files(file)?.is_none() && !self.plaintext(file) {
            return Err(NO_TLS.into());
        }
        self.transport(file, cluster_id, expected)
    }

    /// The transport of a node or client of `cluster_id` (`None`: the
    /// cluster the certificate names), whose certificate must name
    /// `expected` when given.
    pub fn transport(
        &self,
        file: &TlsKeys,
        cluster_id: Option<&str>,
        expected: Option<&Identity>,
    ) -> Result<Transport, String> {
        let Some(files) = self.files(file)? else {
            return Ok(Transport::Plaintext);
        };
        if self.plaintext(file) {
            return Err("--allow-plaintext and the --tls-* options exclude each other".into());
        }
        let cluster = match cluster_id {
            Some(c) => c.to_string(),
            None => files.identity().map_err(|e| e.to_string())?.cluster_id,
        };
        let ctx = TlsContext::load(files, &cluster).map_err(|e| e.to_string())?;
        if let Some(want) = expected {
            let got = ctx.identity();
            if &got != want {
                return Err(format!(
                    "{} names {got}, but this process is {want}",
                    ctx.files().cert.display()
                ));
            }
        }
        Ok(Transport::Tls(Arc::new(ctx)))
    }
}

/// How often a process looks again at how long its certificate has left.
const EXPIRY_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(3600);

/// Sets the expiry gauge to the seconds the certificate in use has left,
/// and warns from [`keel_tls::validity::WARN_BEFORE`] ahead of expiry on.
fn report_expiry(ctx: &TlsContext) {
    let validity = ctx.validity();
    let now = std::time::SystemTime::now();
    metrics::gauge!(keel_tls::validity::EXPIRY_METRIC).set(validity.seconds_left(now) as f64);
    if let Some(days) = validity.days_left_if_soon(now) {
        tracing::warn!(
            days_left = days,
            not_after = %keel_tls::validity::format_unix(validity.not_after),
            cert = %ctx.files().cert.display(),
            "the TLS certificate expires in {days} days; issue a new one, put it in place and send SIGHUP"
        );
    }
}

/// Watches the certificate of a node for as long as the process runs:
///
/// - on every SIGHUP the TLS files are read again: new connections use the
///   new certificate, open ones keep theirs. A certificate that does not
///   load, names another identity (`expected`), does not chain to the CA
///   file, is outside its validity dates or is not the key's leaves the
///   current one in place, with a warning that says why;
/// - the seconds the certificate in use has left are exported as
///   [`keel_tls::validity::EXPIRY_METRIC`], set now, at every reload and
///   every hour, with a warning in its last 30 days.
pub fn watch_certificate(transport: &Transport, expected: Role) {
    let Transport::Tls(ctx) = transport else {
        return;
    };
    let watched = ctx.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(EXPIRY_CHECK_PERIOD);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            report_expiry(&watched);
        }
    });
    let ctx = ctx.clone();
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP; certificates will not be reloaded");
            return;
        }
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let before = ctx.identity();
            match ctx.files().identity() {
                Ok(next) if next.role != expected => {
                    tracing::warn!(
                        current = %before,
                        found = %next,
                        "SIGHUP: the new certificate names another identity; keeping the current one"
                    );
                    continue;
                }
                _ => {}
            }
            match ctx.reload() {
                Ok(identity) => {
                    let serial = keel_tls::context::leaf_certificate(&ctx.files().cert)
                        .ok()
                        .and_then(|der| keel_tls::context::serial_hex(&der));
                    tracing::info!(
                        %identity,
                        serial = serial.as_deref().unwrap_or("?"),
                        cert = %ctx.files().cert.display(),
                        not_after = %keel_tls::validity::format_unix(ctx.validity().not_after),
                        "SIGHUP: TLS certificate reloaded; new connections use it"
                    );
                    report_expiry(&ctx);
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    current = %before,
                    "SIGHUP: cannot reload the TLS files; keeping the current certificate"
                ),
            }
        }
    });
}

/// Whether `address` (HOST:PORT) speaks TLS: it is sent the start of a
/// plaintext HTTP/2 connection, and a TLS listener answers that with an
/// alert record (content type 21, version 3.x). False when it answers
/// otherwise, says nothing within `wait`, or cannot be reached (the call
/// itself then reports why).
pub fn speaks_tls(address: &str, wait: std::time::Duration) -> bool {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let Some(addr) = address.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, wait) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(wait));
    let _ = s.set_write_timeout(Some(wait));
    if s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 2];
    matches!(s.read_exact(&mut head), Ok(()) if head == [0x15, 0x03])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that answers the way a TLS server answers a plaintext
    /// HTTP/2 preface (an alert record), and one that answers as an
    /// HTTP/2 server does (a SETTINGS frame).
    fn answering(reply: &'static [u8]) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 24];
                let _ = s.read_exact(&mut buf);
                let _ = s.write_all(reply);
            }
        });
        addr
    }

    #[test]
    fn a_tls_listener_is_told_from_a_plaintext_one() {
        let wait = std::time::Duration::from_secs(2);
        assert!(speaks_tls(
            &answering(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]),
            wait
        ));
        assert!(!speaks_tls(&answering(&[0, 0, 0, 4, 0, 0, 0, 0, 0]), wait));
        // Nothing listening: not TLS (the call reports the refusal).
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .to_string();
        assert!(!speaks_tls(&closed, wait));
        assert!(!speaks_tls("no-such-host.invalid:9093", wait));
    }
}
