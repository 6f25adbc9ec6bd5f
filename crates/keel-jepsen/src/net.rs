//! The run's packet filter: the cluster kit's [`Net`] in a chain of the
//! run's own (`KEEL-JEPSEN`), removed on heal, on exit, on panic and on
//! Ctrl-C; a chain left by a crashed run is removed at start.

pub use keel_testkit::netfilter::{unavailable_reason, Net};

/// Our chain.
pub const CHAIN: &str = "KEEL-JEPSEN";

/// The run's net, after removing whatever a crashed run left.
pub fn install() -> Result<Net, String> {
    Net::install(CHAIN, true)
}

/// Removes our chain and its jumps, whatever state they are in.
pub fn teardown() {
    keel_testkit::netfilter::teardown(CHAIN)
}
