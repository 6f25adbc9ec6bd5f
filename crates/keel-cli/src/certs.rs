//! `keel certs`: a cluster CA and the certificates of its controllers,
//! brokers and users, made here with rcgen (nothing shells out to
//! `openssl`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use keel_tls::certs::{self, InitSpec};
use keel_tls::Identity;

use crate::EXIT_LOCAL;

#[derive(Args, Debug)]
pub struct CertsArgs {
    #[command(subcommand)]
    cmd: CertsCmd,
}

#[derive(Subcommand, Debug)]
enum CertsCmd {
    /// Create a CA and one certificate per controller, broker and user.
    ///
    /// Example: keel certs init --dir certs --cluster-id prod --controllers 3 --brokers 3 --users admin
    Init {
        /// Directory to write into (created; no file is ever overwritten).
        #[arg(long)]
        dir: PathBuf,
        /// The cluster id the certificates name (keel://<cluster>/...).
        #[arg(long)]
        cluster_id: String,
        /// Controllers 1..=N.
        #[arg(long, default_value_t = 3)]
        controllers: u64,
        /// Brokers 1..=N.
        #[arg(long, default_value_t = 3)]
        brokers: u32,
        /// User certificates, comma separated (e.g. admin,alice).
        #[arg(long, value_delimiter = ',', default_value = "admin")]
        users: Vec<String>,
        /// IP addresses every node certificate also names (for tools that
        /// check the address; Keel itself checks identities).
        #[arg(long = "ip", value_delimiter = ',')]
        ips: Vec<IpAddr>,
        /// DNS names every node certificate also names.
        #[arg(long = "dns", value_delimiter = ',')]
        dns: Vec<String>,
    },
    /// Issue one more certificate with an existing CA (a new node or user,
    /// or a rotation: the new files replace nothing; move them in place
    /// and send the process SIGHUP).
    ///
    /// Example: keel certs issue --dir certs --cluster-id prod --broker 4 --out /tmp/b4
    Issue {
        /// Where ca.pem and ca-key.pem are.
        #[arg(long)]
        dir: PathBuf,
        /// The cluster id the certificates name (keel://<cluster>/...).
        #[arg(long)]
        cluster_id: String,
        /// Issue a certificate for this controller id.
        #[arg(long, conflicts_with_all = ["broker", "user"])]
        controller: Option<u64>,
        /// Issue a certificate for this broker id.
        #[arg(long, conflicts_with = "user")]
        broker: Option<u32>,
        /// Issue a certificate for this user name.
        #[arg(long)]
        user: Option<String>,
        /// Directory for the new certificate and key (default: --dir).
        #[arg(long)]
        out: Option<PathBuf>,
        /// IP addresses a node certificate also names (comma separated).
        #[arg(long = "ip", value_delimiter = ',')]
        ips: Vec<IpAddr>,
        /// DNS names a node certificate also names (comma separated).
        #[arg(long = "dns", value_delimiter = ',')]
        dns: Vec<String>,
    },
}

/// `certs init`: writes the CA and every identity's files into `dir`,
/// naming each file written.
fn init_dir(dir: &std::path::Path, spec: &InitSpec) -> ExitCode {
    match certs::init(dir, spec) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            eprintln!(
                "keep {} offline: whoever holds it can make identities of this cluster",
                dir.join("ca-key.pem").display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_LOCAL)
        }
    }
}

pub fn run(a: CertsArgs) -> ExitCode {
    match a.cmd {
        CertsCmd::Init {
            dir,
            cluster_id,
            controllers,
            brokers,
            users,
            ips,
            dns,
        } => {
            let spec = InitSpec {
                cluster_id,
                controllers,
                brokers,
                users,
                ips,
                dns,
            };
            init_dir(&dir, &spec)
        }
        CertsCmd::Issue {
            dir,
            cluster_id,
            controller,
            broker,
            user,
            out,
            ips,
            dns,
        } => {
            let identity = match (controller, broker, user) {
                (Some(c), None, None) => Identity::controller(&cluster_id, c),
                (None, Some(b), None) => Identity::broker(&cluster_id, b),
                (None, None, Some(u)) => {
                    match Identity::from_uri(&Identity::user(&cluster_id, &u).uri()) {
                        Ok(id) => id,
                        Err(e) => {
                            eprintln!("error: {e}");
                            return ExitCode::from(2);
                        }
                    }
                }
                _ => {
                    eprintln!("error: name exactly one of --controller, --broker, --user");
                    return ExitCode::from(2);
                }
            };
            let ca = match certs::load_ca(&dir) {
                Ok(ca) => ca,
                Err(e) => {
                    eprintln!("error: cannot read the CA in {}: {e}", dir.display());
                    return ExitCode::from(EXIT_LOCAL);
                }
            };
            let out = out.unwrap_or(dir);
            let written = ca
                .issue(&identity, &ips, &dns)
                .and_then(|issued| certs::write_issued(&out, &identity, &issued));
            match written {
                Ok((cert, key)) => {
                    println!("{}", cert.display());
                    println!("{}", key.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_LOCAL)
                }
            }
        }
    }
}
