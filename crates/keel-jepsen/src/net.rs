//! Network partitions enforced by the kernel: iptables DROP rules in a
//! chain of our own (`KEEL-JEPSEN`), jumped to from INPUT and OUTPUT, one
//! rule per direction of each cut pair of node addresses. Every rule goes
//! away on heal, on exit (Drop), on panic (hook) and on Ctrl-C (the runner
//! tears down before exiting); a chain left by a crashed run is removed at
//! start.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// Our chain.
pub const CHAIN: &str = "KEEL-JEPSEN";

/// Set while our chain may exist (read by the panic hook).
static INSTALLED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

fn ipt(args: &[&str]) -> Result<(), String> {
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

/// The effective uid of this process (from /proc).
fn euid() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Why partitions cannot be enforced here, if they cannot.
pub fn unavailable_reason() -> Option<String> {
    match euid() {
        Some(0) => {}
        Some(u) => {
            return Some(format!(
                "network partitions need root (iptables); running as uid {u}"
            ))
        }
        None => return Some("cannot tell whether we run as root".into()),
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

/// Removes our chain and its jumps, whatever state they are in.
pub fn teardown() {
    for hook in ["INPUT", "OUTPUT"] {
        for _ in 0..16 {
            if ipt(&["-D", hook, "-j", CHAIN]).is_err() {
                break;
            }
        }
    }
    let _ = ipt(&["-F", CHAIN]);
    let _ = ipt(&["-X", CHAIN]);
    INSTALLED.store(false, Ordering::SeqCst);
}

/// The packet filter; dropping it removes every rule.
pub struct Net {
    cut: BTreeSet<(Ipv4Addr, Ipv4Addr)>,
}

impl Net {
    /// Flushes a stale chain, creates ours and hooks it into INPUT/OUTPUT.
    pub fn install() -> Result<Self, String> {
        HOOK.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if INSTALLED.load(Ordering::SeqCst) {
                    teardown();
                }
                prev(info);
            }));
        });
        teardown();
        INSTALLED.store(true, Ordering::SeqCst);
        ipt(&["-N", CHAIN])?;
        ipt(&["-I", "INPUT", "1", "-j", CHAIN])?;
        ipt(&["-I", "OUTPUT", "1", "-j", CHAIN])?;
        Ok(Net {
            cut: BTreeSet::new(),
        })
    }

    /// Drops traffic both ways between each pair.
    pub fn cut(&mut self, pairs: &[(Ipv4Addr, Ipv4Addr)]) -> Result<(), String> {
        if !INSTALLED.load(Ordering::SeqCst) {
            return Err("the chain was torn down (interrupted)".into());
        }
        for &(a, b) in pairs {
            if a == b {
                continue;
            }
            for (s, d) in [(a, b), (b, a)] {
                if self.cut.insert((s, d)) {
                    ipt(&[
                        "-A",
                        CHAIN,
                        "-s",
                        &s.to_string(),
                        "-d",
                        &d.to_string(),
                        "-j",
                        "DROP",
                    ])?;
                }
            }
        }
        Ok(())
    }

    /// Number of DROP rules in place.
    pub fn rules(&self) -> usize {
        self.cut.len()
    }

    /// Removes every rule (the chain stays).
    pub fn heal(&mut self) -> Result<(), String> {
        self.cut.clear();
        ipt(&["-F", CHAIN])
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        teardown();
    }
}
