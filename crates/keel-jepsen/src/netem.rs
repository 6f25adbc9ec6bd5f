//! The `net-slow` nemesis's slow network: `tc netem` (latency, jitter,
//! loss, reordering) on the loopback interface, for the run's own node
//! addresses only. A `prio` qdisc of ours (handle [`HANDLE`]) becomes
//! `lo`'s root; its default bands carry every other packet untouched, and
//! `u32` filters send packets from or to one of our 127.x addresses to a
//! fourth band with the netem qdisc. Everything is removed on heal, when
//! the [`Netem`] is dropped (exit, or a panic unwinding) and on Ctrl-C
//! ([`teardown`]); a leftover of ours from a crashed run is removed at
//! start. A root qdisc on `lo` that is not ours is never touched: the run
//! refuses to start.
//!
//! Some kernels ship without `sch_netem` or `sch_prio` (a probe at start
//! finds out). There the nemesis falls back to what iptables can do: each
//! packet from or to one of our addresses is dropped with the setting's
//! loss probability (`-m statistic`, in a chain of our own,
//! [`LOSS_CHAIN`]); TCP's retransmissions then add latency and jitter of
//! their own, but no reordering. Every fault event says which mode ran.

use std::net::Ipv4Addr;
use std::process::Command;

use keel_testkit::netfilter::ipt;
use rand::Rng;
use serde::Serialize;

/// Our root qdisc's handle (`7ee5:`; its netem is `7ee6:`).
pub const HANDLE: &str = "7ee5:";
const NETEM_HANDLE: &str = "7ee6:";
/// The band our filters send our packets to.
const SLOW_BAND: &str = "7ee5:4";
const DEV: &str = "lo";

/// One slow-network setting.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Slow {
    pub delay_ms: u32,
    pub jitter_ms: u32,
    pub loss_pct: f32,
    pub reorder_pct: f32,
}

impl Slow {
    /// A random setting: 5-200 ms of latency with up to half of it as
    /// jitter, up to 20% loss, up to 30% reordering.
    pub fn draw(rng: &mut impl Rng) -> Self {
        let delay_ms = rng.random_range(5..=200u32);
        Slow {
            delay_ms,
            jitter_ms: rng.random_range(0..=delay_ms / 2),
            loss_pct: (rng.random_range(0..=200u32) as f32) / 10.0,
            reorder_pct: (rng.random_range(0..=300u32) as f32) / 10.0,
        }
    }

    /// The netem arguments of this setting.
    pub fn netem_args(&self) -> Vec<String> {
        let mut v = vec![
            "netem".to_string(),
            "delay".into(),
            format!("{}ms", self.delay_ms),
        ];
        if self.jitter_ms > 0 {
            v.push(format!("{}ms", self.jitter_ms));
        }
        if self.loss_pct > 0.0 {
            v.extend(["loss".into(), format!("{}%", self.loss_pct)]);
        }
        if self.reorder_pct > 0.0 {
            v.extend([
                "reorder".into(),
                format!("{}%", self.reorder_pct),
                "50%".into(),
            ]);
        }
        v
    }
}

/// What `lo`'s root qdisc is, from `tc qdisc show dev lo`.
#[derive(Debug, PartialEq, Eq)]
pub enum Root {
    /// The default (`noqueue`) or none.
    Default,
    /// Ours (left by a crashed run, or installed by this one).
    Ours,
    /// Somebody else's: the line that shows it.
    Foreign(String),
}

/// Parses `tc qdisc show dev lo`.
pub fn parse_root(show: &str) -> Root {
    for line in show.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.first() != Some(&"qdisc") || !w.contains(&"root") {
            continue;
        }
        return match (w.get(1), w.get(2)) {
            (Some(&"noqueue"), _) => Root::Default,
            (Some(&"prio"), Some(&h)) if h == HANDLE => Root::Ours,
            _ => Root::Foreign(line.trim().to_string()),
        };
    }
    Root::Default
}

fn tc(args: &[&str]) -> Result<String, String> {
    let out = Command::new("tc")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run tc: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "tc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why the slow network cannot be set up here (`None`: it can).
pub fn unavailable_reason() -> Option<String> {
    // Root, and iptables for the loss-only fallback.
    if let Some(why) = keel_testkit::netfilter::unavailable_reason() {
        return Some(why);
    }
    let show = match tc(&["qdisc", "show", "dev", DEV]) {
        Ok(s) => s,
        Err(e) => return Some(format!("{e} (install iproute2: scripts/test-deps.sh)")),
    };
    match parse_root(&show) {
        Root::Foreign(line) => Some(format!(
            "the loopback interface already has a root qdisc that is not keel jepsen's ({line}); \
             refusing to replace it (remove it with `tc qdisc del dev lo root` if it is stale)"
        )),
        Root::Default | Root::Ours => None,
    }
}

/// Removes our qdisc (and with it its filters and netem) if it is there.
pub fn teardown() {
    if let Ok(show) = tc(&["qdisc", "show", "dev", DEV]) {
        if parse_root(&show) == Root::Ours {
            let _ = tc(&["qdisc", "del", "dev", DEV, "root", "handle", HANDLE]);
        }
    }
}

/// The iptables chain of the loss-only fallback.
pub const LOSS_CHAIN: &str = "KEEL-JEPSEN-SLOW";

/// How the slow network is made.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `tc netem` behind a `prio` qdisc: latency, jitter, loss, reordering.
    Netem,
    /// The kernel has no netem: random loss with iptables only.
    IptablesLoss,
}

/// Adds our root qdisc on [`DEV`]: `prio` with a fourth band, the slow one.
fn add_root() -> Result<String, String> {
    tc(&[
        "qdisc", "add", "dev", DEV, "root", "handle", HANDLE, "prio", "bands", "4",
    ])
}

/// Adds our netem qdisc under the slow band; `netem` is its part of the
/// command (`netem delay 1ms`).
fn add_netem(netem: &[&str]) -> Result<String, String> {
    let mut args = vec![
        "qdisc",
        "add",
        "dev",
        DEV,
        "parent",
        SLOW_BAND,
        "handle",
        NETEM_HANDLE,
    ];
    args.extend(netem);
    tc(&args)
}

/// Whether this kernel has the `prio` and `netem` qdiscs: adds ours with
/// no filter (no packet goes through the netem band) and removes it.
fn kernel_has_netem() -> bool {
    let ok = add_root()
        .and_then(|_| add_netem(&["netem", "delay", "1ms"]))
        .is_ok();
    teardown();
    ok
}

/// Removes everything of ours: the qdisc and the fallback's chain.
pub fn teardown_all() {
    teardown();
    keel_testkit::netfilter::teardown(LOSS_CHAIN);
}

/// The run's slow network; dropping it removes it.
pub struct Netem {
    /// Whether our qdisc or loss rules are in place now.
    slowed: bool,
    mode: Mode,
}

impl Netem {
    /// Removes a leftover of ours; refuses when `lo` has a foreign root.
    pub fn install() -> Result<Self, String> {
        if let Some(why) = unavailable_reason() {
            return Err(why);
        }
        teardown_all();
        let mode = if kernel_has_netem() {
            Mode::Netem
        } else {
            Mode::IptablesLoss
        };
        Ok(Netem {
            slowed: false,
            mode,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Slows every packet from or to one of `ips` as `slow` says (replacing
    /// a setting in place).
    pub fn slow(&mut self, ips: &[Ipv4Addr], slow: &Slow) -> Result<(), String> {
        self.heal()?;
        if self.mode == Mode::IptablesLoss {
            return self.lose(ips, slow);
        }
        // Foreign qdiscs appear between runs too: look again.
        if let Some(why) = unavailable_reason() {
            return Err(why);
        }
        add_root()?;
        self.slowed = true;
        let netem = slow.netem_args();
        add_netem(&netem.iter().map(String::as_str).collect::<Vec<_>>())?;
        for ip in ips {
            if !ip.is_loopback() {
                continue;
            }
            let ip = format!("{ip}/32");
            for dir in ["src", "dst"] {
                tc(&[
                    "filter", "add", "dev", DEV, "parent", HANDLE, "protocol", "ip", "prio", "1",
                    "u32", "match", "ip", dir, &ip, "flowid", SLOW_BAND,
                ])?;
            }
        }
        Ok(())
    }

    /// The fallback: drops packets from or to `ips` at random, with the
    /// setting's loss (at least 5%, or the fault would do nothing).
    fn lose(&mut self, ips: &[Ipv4Addr], slow: &Slow) -> Result<(), String> {
        let _ = ipt(&["-N", LOSS_CHAIN]);
        self.slowed = true;
        for hook in ["INPUT", "OUTPUT"] {
            if ipt(&["-C", hook, "-j", LOSS_CHAIN]).is_err() {
                ipt(&["-I", hook, "1", "-j", LOSS_CHAIN])?;
            }
        }
        // Each packet meets two rules (its source's and its
        // destination's) when both are ours: halve the probability of each.
        let p = format!("{:.4}", slow.loss_pct.max(5.0) / 200.0);
        for ip in ips.iter().filter(|ip| ip.is_loopback()) {
            let ip = ip.to_string();
            for dir in ["-s", "-d"] {
                ipt(&[
                    "-A",
                    LOSS_CHAIN,
                    dir,
                    &ip,
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &p,
                    "-j",
                    "DROP",
                ])?;
            }
        }
        Ok(())
    }

    /// Removes the slow network (a no-op when it is not in place).
    pub fn heal(&mut self) -> Result<(), String> {
        if !self.slowed {
            return Ok(());
        }
        self.slowed = false;
        match self.mode {
            Mode::Netem => tc(&["qdisc", "del", "dev", DEV, "root", "handle", HANDLE]).map(|_| ()),
            Mode::IptablesLoss => {
                keel_testkit::netfilter::teardown(LOSS_CHAIN);
                Ok(())
            }
        }
    }

    /// What a fault of `slow` does in this mode, for the fault's record.
    pub fn describe(&self, slow: &Slow) -> String {
        match self.mode {
            Mode::Netem => slow.netem_args().join(" "),
            Mode::IptablesLoss => format!(
                "no netem in this kernel: iptables drops {}% of our packets at random (no added delay or reordering)",
                slow.loss_pct.max(5.0)
            ),
        }
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        let _ = self.heal();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn only_the_default_root_or_ours_may_be_replaced() {
        assert_eq!(
            parse_root("qdisc noqueue 0: root refcnt 2 \n"),
            Root::Default
        );
        assert_eq!(parse_root(""), Root::Default);
        assert_eq!(
            parse_root(
                "qdisc prio 7ee5: root refcnt 2 bands 4 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n\
                 qdisc netem 7ee6: parent 7ee5:4 limit 1000 delay 50ms\n"
            ),
            Root::Ours
        );
        assert!(matches!(
            parse_root("qdisc netem 8001: root refcnt 2 limit 1000 delay 100ms\n"),
            Root::Foreign(_)
        ));
        assert!(matches!(
            parse_root("qdisc prio 1: root refcnt 2 bands 3\n"),
            Root::Foreign(_)
        ));
    }

    #[test]
    fn a_drawn_setting_is_a_valid_netem_command() {
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..100 {
            let s = Slow::draw(&mut rng);
            assert!((5..=200).contains(&s.delay_ms));
            assert!(s.jitter_ms <= s.delay_ms / 2);
            assert!(s.loss_pct <= 20.0 && s.reorder_pct <= 30.0);
            let a = s.netem_args();
            assert_eq!(a[..3], ["netem", "delay", &format!("{}ms", s.delay_ms)]);
        }
        let s = Slow {
            delay_ms: 100,
            jitter_ms: 20,
            loss_pct: 5.5,
            reorder_pct: 10.0,
        };
        assert_eq!(
            s.netem_args().join(" "),
            "netem delay 100ms 20ms loss 5.5% reorder 10% 50%"
        );
    }
}
