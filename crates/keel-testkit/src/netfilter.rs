//! Network partitions enforced by the kernel, on this machine's loopback
//! addresses only: iptables DROP rules in a chain of our own, jumped to
//! from INPUT and OUTPUT, one rule per direction of each cut pair of node
//! addresses. A [`Net`] removes exactly the rules it added on heal and on
//! drop (also while a panicking test unwinds); the chain goes with the
//! last `Net` of the process and on [`teardown`]. A chain left by a crashed process is removed
//! when the next one with its name is installed ([`stale_chains`] finds
//! per-process chains whose process is gone).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Chains this process installed, with how many live [`Net`]s use each.
static INSTALLED: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// Runs `iptables -w ARGS` (waiting for the xtables lock); the error
/// names the command and iptables' own message.
pub fn ipt(args: &[&str]) -> Result<(), String> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The effective uid of this process.
fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Why partitions cannot be enforced here, if they cannot.
pub fn unavailable_reason() -> Option<String> {
    let uid = euid();
    if uid != 0 {
        return Some(format!(
            "network partitions need root (iptables); running as uid {uid}"
        ));
    }
    match Command::new("iptables")
        .args(["-w", "-L", "INPUT", "-n"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Err(e) => Some(format!(
            "iptables not found ({e}); install it (apt-get install -y iptables)"
        )),
        Ok(o) if !o.status.success() => Some(format!(
            "iptables does not work here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

/// Removes `chain` and its jumps, whatever state they are in.
pub fn teardown(chain: &str) {
    for hook in ["INPUT", "OUTPUT"] {
        for _ in 0..16 {
            if ipt(&["-D", hook, "-j", chain]).is_err() {
                break;
            }
        }
    }
    let _ = ipt(&["-F", chain]);
    let _ = ipt(&["-X", chain]);
}

/// The per-process chain name for `pid` (`KEEL-T<pid>`).
pub fn process_chain(pid: u32) -> String {
    format!("KEEL-T{pid}")
}

/// Per-process chains (`KEEL-T<pid>`) whose process no longer runs.
pub fn stale_chains() -> Vec<String> {
    let Ok(out) = Command::new("iptables").args(["-w", "-S"]).output() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut stale = BTreeSet::new();
    for line in text.lines() {
        let Some(name) = line.strip_prefix("-N KEEL-T") else {
            continue;
        };
        if let Ok(pid) = name.parse::<u32>() {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                stale.insert(process_chain(pid));
            }
        }
    }
    stale.into_iter().collect()
}

/// A set of cut links; dropping it removes its rules (also while a
/// panicking test unwinds). There is deliberately no panic hook that tears
/// chains down: tests of one process share its chain, and one test's
/// failure must not heal another test's partition. A process that dies
/// without unwinding leaves its chain to [`stale_chains`].
pub struct Net {
    chain: String,
    /// (source, destination) pairs whose packets are dropped.
    cut: BTreeSet<(Ipv4Addr, Ipv4Addr)>,
}

impl Net {
    /// Cuts in this process's own chain (shared by every `Net` of the
    /// process, e.g. tests running side by side).
    pub fn for_this_process() -> Result<Self, String> {
        for stale in stale_chains() {
            teardown(&stale);
        }
        Self::install(&process_chain(std::process::id()), false)
    }

    /// Cuts in `chain`; `fresh` removes whatever a crashed run left in it
    /// first (for a chain one run owns, like `KEEL-JEPSEN`).
    pub fn install(chain: &str, fresh: bool) -> Result<Self, String> {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        match installed.iter_mut().find(|(c, _)| c == chain) {
            Some((_, users)) => *users += 1,
            None => {
                if fresh {
                    teardown(chain);
                }
                // The chain may exist already (another process of the
                // same name, or a stale one): reuse it.
                let _ = ipt(&["-N", chain]);
                for hook in ["INPUT", "OUTPUT"] {
                    if ipt(&["-C", hook, "-j", chain]).is_err() {
                        ipt(&["-I", hook, "1", "-j", chain])?;
                    }
                }
                installed.push((chain.to_string(), 1));
            }
        }
        Ok(Net {
            chain: chain.to_string(),
            cut: BTreeSet::new(),
        })
    }

    /// The chain this net's rules live in.
    pub fn chain(&self) -> &str {
        &self.chain
    }

    fn drop_rule(&self, op: &str, s: Ipv4Addr, d: Ipv4Addr) -> Result<(), String> {
        ipt(&[
            op,
            &self.chain,
            "-s",
            &s.to_string(),
            "-d",
            &d.to_string(),
            "-j",
            "DROP",
        ])
    }

    /// Drops traffic both ways between each pair.
    pub fn cut(&mut self, pairs: &[(Ipv4Addr, Ipv4Addr)]) -> Result<(), String> {
        for &(a, b) in pairs {
            self.cut_one_way(&[(a, b), (b, a)])?;
        }
        Ok(())
    }

    /// Drops traffic from the first address of each pair to the second
    /// only (the other direction still flows).
    pub fn cut_one_way(&mut self, pairs: &[(Ipv4Addr, Ipv4Addr)]) -> Result<(), String> {
        for &(s, d) in pairs {
            if s == d || !(s.is_loopback() && d.is_loopback()) {
                // Never touch anything but this machine's own loopback.
                continue;
            }
            if self.cut.insert((s, d)) {
                self.drop_rule("-A", s, d)?;
            }
        }
        Ok(())
    }

    /// Number of DROP rules in place.
    pub fn rules(&self) -> usize {
        self.cut.len()
    }

    /// Removes every rule this net added.
    pub fn heal(&mut self) -> Result<(), String> {
        let mut first_err = None;
        for (s, d) in std::mem::take(&mut self.cut) {
            if let Err(e) = self.drop_rule("-D", s, d) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = self.heal();
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pos) = installed.iter().position(|(c, _)| *c == self.chain) {
            installed[pos].1 -= 1;
            if installed[pos].1 == 0 {
                installed.remove(pos);
                teardown(&self.chain);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs only where iptables works (root; CI installs it).
    #[test]
    fn a_cut_drops_packets_between_loopback_addresses_and_heal_restores_them() {
        if let Some(why) = unavailable_reason() {
            eprintln!("skipped: {why}");
            return;
        }
        let a = Ipv4Addr::new(127, 0, 77, 1);
        let b = Ipv4Addr::new(127, 0, 77, 2);
        let listener = std::net::TcpListener::bind((b, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let connect = || {
            let sock =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            sock.bind(&std::net::SocketAddr::from((a, 0)).into())
                .unwrap();
            sock.connect_timeout(
                &std::net::SocketAddr::from((b, port)).into(),
                std::time::Duration::from_millis(300),
            )
        };
        assert!(connect().is_ok());
        let mut net = Net::for_this_process().unwrap();
        net.cut(&[(a, b)]).unwrap();
        assert_eq!(net.rules(), 2);
        assert!(connect().is_err(), "the cut drops the handshake");
        // Non-loopback addresses are never touched.
        net.cut(&[(Ipv4Addr::new(10, 0, 0, 1), a)]).unwrap();
        assert_eq!(net.rules(), 2);
        net.heal().unwrap();
        assert!(connect().is_ok());
        drop(net);
        let rules = Command::new("iptables")
            .args(["-w", "-S"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&rules.stdout).contains(&process_chain(std::process::id())),
            "the chain is gone with the last net"
        );
    }
}
