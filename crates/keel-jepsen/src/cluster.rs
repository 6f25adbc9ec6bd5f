//! The cluster under test: real `keel controller` and `keel broker`
//! processes, each on its own loopback address (127.0.2.11-13 for
//! controllers, 127.0.2.21.. for brokers), data and logs under the run
//! directory. Every child is killed when the cluster is dropped.

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Address the harness's own clients connect from.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 2, 1);
pub const CONTROLLER_PORT: u16 = 9093;
pub const BROKER_PORT: u16 = 9092;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Controller,
    Broker,
}

/// One node process (and its restarts).
pub struct Node {
    pub role: Role,
    pub id: u32,
    pub ip: Ipv4Addr,
    pub port: u16,
    pub name: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    pub paused: bool,
    pub starts: u32,
}

impl Node {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn spawn(&mut self, exe: &Path) -> std::io::Result<()> {
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        self.starts += 1;
        writeln!(
            out,
            "=== keel-jepsen: start #{} of {} ===",
            self.starts, self.name
        )?;
        let err = out.try_clone()?;
        let child = Command::new(exe)
            .args(&self.args)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.paused {
                self.signal("CONT");
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    pub fn pause(&mut self) {
        if self.running() && !self.paused {
            self.signal("STOP");
            self.paused = true;
        }
    }

    pub fn resume(&mut self) {
        if self.paused {
            self.signal("CONT");
            self.paused = false;
        }
    }

    /// The process exited by itself (not killed by us).
    pub fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(st)) => {
                self.child = None;
                Some(st.to_string())
            }
            _ => None,
        }
    }
}

/// Three controllers and `n` brokers.
pub struct Cluster {
    exe: PathBuf,
    pub nodes: Vec<Node>,
    pub cluster_id: String,
}

/// Timings that make faults bite within seconds.
pub const SESSION_TIMEOUT_MS: u64 = 3000;

impl Cluster {
    /// Lays out the nodes (nothing started yet).
    pub fn new(exe: PathBuf, run_dir: &Path, brokers: usize) -> Self {
        let cluster_id = "keel-jepsen".to_string();
        let controllers: Vec<(u32, Ipv4Addr)> = (1..=3)
            .map(|i| (i, Ipv4Addr::new(127, 0, 2, 10 + i as u8)))
            .collect();
        let voters = controllers
            .iter()
            .map(|(i, ip)| format!("{i}@{ip}:{CONTROLLER_PORT}"))
            .collect::<Vec<_>>()
            .join(",");
        let ctrl_list = controllers
            .iter()
            .map(|(_, ip)| format!("{ip}:{CONTROLLER_PORT}"))
            .collect::<Vec<_>>()
            .join(",");
        let logs = run_dir.join("logs");
        let data = run_dir.join("data");
        let mut nodes = Vec::new();
        for (i, ip) in &controllers {
            let name = format!("c{i}");
            let data_dir = data.join(&name);
            let args = vec![
                "controller".to_string(),
                "--node-id".into(),
                i.to_string(),
                "--listen".into(),
                format!("{ip}:{CONTROLLER_PORT}"),
                "--voters".into(),
                voters.clone(),
                "--data-dir".into(),
                data_dir.display().to_string(),
                "--cluster-id".into(),
                cluster_id.clone(),
                "--session-timeout-ms".into(),
                SESSION_TIMEOUT_MS.to_string(),
            ];
            nodes.push(Node {
                role: Role::Controller,
                id: *i,
                ip: *ip,
                port: CONTROLLER_PORT,
                log: logs.join(format!("{name}.log")),
                name,
                data_dir,
                args,
                child: None,
                paused: false,
                starts: 0,
            });
        }
        for b in 1..=brokers as u32 {
            let ip = Ipv4Addr::new(127, 0, 2, 20 + b as u8);
            let name = format!("b{b}");
            let data_dir = data.join(&name);
            let args = vec![
                "broker".to_string(),
                "--broker-id".into(),
                b.to_string(),
                "--listen".into(),
                format!("{ip}:{BROKER_PORT}"),
                "--controllers".into(),
                ctrl_list.clone(),
                "--cluster-id".into(),
                cluster_id.clone(),
                "--data-dir".into(),
                data_dir.display().to_string(),
                "--heartbeat-interval-ms".into(),
                "300".into(),
                "--session-timeout-ms".into(),
                SESSION_TIMEOUT_MS.to_string(),
                "--replica-lag-time-max-ms".into(),
                "3000".into(),
            ];
            nodes.push(Node {
                role: Role::Broker,
                id: b,
                ip,
                port: BROKER_PORT,
                log: logs.join(format!("{name}.log")),
                name,
                data_dir,
                args,
                child: None,
                paused: false,
                starts: 0,
            });
        }
        Cluster {
            exe,
            nodes,
            cluster_id,
        }
    }

    /// Checks every address is free, then starts every node.
    pub fn start(&mut self) -> Result<(), String> {
        for n in &self.nodes {
            if let Err(e) = TcpListener::bind((n.ip, n.port)) {
                return Err(format!(
                    "{} cannot bind {}: {e} (another run still alive?)",
                    n.name,
                    n.addr()
                ));
            }
            if let Some(p) = n.log.parent() {
                std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
        let exe = self.exe.clone();
        for n in self.nodes.iter_mut() {
            n.spawn(&exe)
                .map_err(|e| format!("cannot start {}: {e}", n.name))?;
        }
        Ok(())
    }

    /// Restarts a killed node on its data dir.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        let exe = self.exe.clone();
        let n = &mut self.nodes[i];
        if n.running() {
            return Ok(());
        }
        n.spawn(&exe)
            .map_err(|e| format!("cannot restart {}: {e}", n.name))
    }

    pub fn controllers(&self) -> impl Iterator<Item = (usize, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.role == Role::Controller)
    }

    pub fn brokers(&self) -> impl Iterator<Item = (usize, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.role == Role::Broker)
    }

    pub fn controller_addrs(&self) -> Vec<String> {
        self.controllers().map(|(_, n)| n.addr()).collect()
    }

    /// Resumes paused nodes and restarts killed ones (or ones that died).
    pub fn heal_processes(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        for i in 0..self.nodes.len() {
            if let Some(st) = self.nodes[i].exited() {
                done.push(format!("{} had exited ({st})", self.nodes[i].name));
            }
            if self.nodes[i].paused {
                self.nodes[i].resume();
                done.push(format!("resumed {}", self.nodes[i].name));
            }
            if !self.nodes[i].running() {
                match self.restart(i) {
                    Ok(()) => done.push(format!("restarted {}", self.nodes[i].name)),
                    Err(e) => done.push(e),
                }
            }
        }
        done
    }

    /// Kills everything (SIGCONT first for paused nodes).
    pub fn shutdown(&mut self) {
        for n in self.nodes.iter_mut() {
            n.kill();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
        std::thread::sleep(Duration::from_millis(10));
    }
}
