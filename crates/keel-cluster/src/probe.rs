//! What the kernel says about a node's process and about the machine, read
//! through the `procfs` crate: CPU time, memory, bytes written to storage,
//! the machine's busy time, load and free memory, who listens on an
//! address, and the disk space a data dir takes. Every probe answers
//! "unknown" (`None`, or 0 where a figure is only reported) instead of
//! failing: a process may exit between two reads.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use procfs::process::{FDTarget, Process};
use procfs::{Current, CurrentSI};

/// Clock ticks per second of the CPU figures (USER_HZ, 100 on Linux).
pub fn ticks_per_second() -> f64 {
    procfs::ticks_per_second() as f64
}

/// CPU time (utime + stime, clock ticks) process `pid` used so far, all its
/// threads together.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = Process::new(pid as i32).ok()?.stat().ok()?;
    Some(s.utime + s.stime)
}

/// CPU time (clock ticks) this process used so far.
pub fn own_cpu_ticks() -> Option<u64> {
    let s = Process::myself().ok()?.stat().ok()?;
    Some(s.utime + s.stime)
}

/// Busy time of a CPU-time line: everything but idle and iowait (guest
/// time is already inside user and nice).
pub fn busy_ticks(t: &procfs::CpuTime) -> u64 {
    t.user + t.nice + t.system + t.irq.unwrap_or(0) + t.softirq.unwrap_or(0) + t.steal.unwrap_or(0)
}

/// Busy clock ticks of the whole machine (all CPUs) so far.
pub fn machine_busy_ticks() -> Option<u64> {
    Some(busy_ticks(&procfs::KernelStats::current().ok()?.total))
}

/// A memory figure of a process's `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Resident set size (`VmRSS`).
    Rss,
    /// Its anonymous part (`RssAnon`): the heap, not mapped files.
    RssAnon,
    /// The peak resident set size (`VmHWM`).
    PeakRss,
}

/// `what` of process `pid`, in bytes; 0 if unknown.
pub fn memory_bytes(pid: u32, what: Memory) -> u64 {
    let Some(s) = Process::new(pid as i32).ok().and_then(|p| p.status().ok()) else {
        return 0;
    };
    let kb = match what {
        Memory::Rss => s.vmrss,
        Memory::RssAnon => s.rssanon,
        Memory::PeakRss => s.vmhwm,
    };
    kb.unwrap_or(0) * 1024
}

/// Resident memory of this process, in bytes; 0 if unknown.
pub fn own_rss_bytes() -> u64 {
    memory_bytes(std::process::id(), Memory::Rss)
}

/// Bytes process `pid` caused to be written to storage so far, net of the
/// writes cancelled before they reached it (a page dirtied and then
/// truncated away); counted per page, so small writes round up to 4 KiB.
pub fn write_bytes(pid: u32) -> Option<u64> {
    let io = Process::new(pid as i32).ok()?.io().ok()?;
    Some(io.write_bytes.saturating_sub(io.cancelled_write_bytes))
}

/// The machine's 1-minute load average.
pub fn load_avg_1m() -> Option<f64> {
    Some(f64::from(procfs::LoadAverage::current().ok()?.one))
}

/// Memory the kernel says is available for new work, in bytes (`u64::MAX`
/// if unknown, so a guard on it never trips by mistake).
pub fn mem_available_bytes() -> u64 {
    procfs::Meminfo::current()
        .ok()
        .and_then(|m| m.mem_available)
        .unwrap_or(u64::MAX)
}

/// The machine's memory, in bytes (0 if unknown).
pub fn mem_total_bytes() -> u64 {
    procfs::Meminfo::current().map_or(0, |m| m.mem_total)
}

/// The model name of the first CPU.
pub fn cpu_model() -> Option<String> {
    Some(procfs::CpuInfo::current().ok()?.model_name(0)?.to_string())
}

/// Whether a listening socket bound to `local` accepts connections to
/// `want`: the same address, its IPv4-mapped IPv6 form (a Java server's
/// dual-stack socket), or a wildcard on the same port.
pub fn listens_for(local: SocketAddr, want: SocketAddr) -> bool {
    let ip = match local.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    local.port() == want.port() && (ip == want.ip() || ip.is_unspecified())
}

/// The process listening on TCP `addr`, found through /proc; `None` if it
/// cannot be seen (another user's process, say).
pub fn listener_pid(addr: SocketAddr) -> Option<u32> {
    let tables = [procfs::net::tcp(), procfs::net::tcp6()];
    let inode = tables.into_iter().flatten().flatten().find_map(|e| {
        (e.state == procfs::net::TcpState::Listen && listens_for(e.local_address, addr))
            .then_some(e.inode)
    })?;
    // Bounded by the number of processes and their descriptors.
    procfs::process::all_processes()
        .ok()?
        .flatten()
        .find(|p| {
            p.fd().is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| matches!(fd.target, FDTarget::Socket(i) if i == inode))
            })
        })
        .map(|p| p.pid as u32)
}

/// Allocated bytes under `path` (st_blocks × 512, as `du` counts them).
pub fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(rd) = std::fs::read_dir(path) {
            total += rd.flatten().map(|e| disk_bytes(&e.path())).sum::<u64>();
        }
    }
    total
}

/// The Prometheus text a node serves at `http://addr/metrics` (`None` if
/// it does not answer within 5 s).
pub async fn scrape_metrics(addr: std::net::SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let scrape = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        Some(text)
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), scrape)
        .await
        .ok()?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_sees_its_own_cpu_memory_and_writes() {
        let me = std::process::id();
        let before = cpu_ticks(me).expect("own stat");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_mul(31).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(cpu_ticks(me).expect("own stat") >= before);
        assert!(own_cpu_ticks().is_some());
        assert!(own_rss_bytes() > 0);
        assert!(memory_bytes(me, Memory::PeakRss) > 0);
        assert!(write_bytes(me).is_some());
        assert_eq!(cpu_ticks(u32::MAX >> 1), None, "no such process");
        assert_eq!(memory_bytes(u32::MAX >> 1, Memory::Rss), 0);
    }

    #[test]
    fn machine_busy_time_leaves_out_idle_and_iowait() {
        use procfs::FromReadSI;
        let stat = "cpu  100 5 50 1000 40 3 2 1 0 0\ncpu0 50 2 25 500 20 1 1 0 0 0\nctxt 9\nbtime 1\nprocesses 7\n";
        let si = procfs::ExplicitSystemInfo {
            boot_time_secs: 1,
            ticks_per_second: 100,
            page_size: 4096,
            is_little_endian: true,
        };
        let t = procfs::KernelStats::from_read(stat.as_bytes(), &si)
            .expect("parses")
            .total;
        assert_eq!(busy_ticks(&t), 100 + 5 + 50 + 3 + 2 + 1);
        assert!(machine_busy_ticks().is_some());
        assert!(load_avg_1m().is_some());
        assert!(mem_total_bytes() >= mem_available_bytes());
        assert_eq!(ticks_per_second(), 100.0);
    }

    #[test]
    fn a_listener_is_found_by_its_address_in_any_spelling() {
        let want: SocketAddr = "127.0.21.1:2181".parse().unwrap();
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(listens_for(want, want));
        assert!(listens_for(at("[::ffff:127.0.21.1]:2181"), want));
        assert!(listens_for(at("0.0.0.0:2181"), want));
        assert!(listens_for(at("[::]:2181"), want));
        assert!(!listens_for(at("127.0.21.2:2181"), want));
        assert!(!listens_for(at("127.0.21.1:2182"), want));
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert_eq!(listener_pid(addr), Some(std::process::id()));
        drop(l);
        assert_eq!(listener_pid(addr), None);
    }

    #[test]
    fn disk_use_counts_allocated_blocks_of_a_whole_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/f"), vec![1u8; 64 << 10]).unwrap();
        let used = disk_bytes(dir.path());
        assert!(used >= 64 << 10, "{used}");
        assert_eq!(disk_bytes(&dir.path().join("missing")), 0);
    }
}
