#!/usr/bin/env bash
# `keel bench compare`: the `commit` workload (100-byte durable writes, 1 / 16
# / 64 concurrent writers) against a 3-node ZooKeeper ensemble, a 3-node etcd
# cluster and a 3-node Keel quorum, all on this machine's loopback, driven by
# one load generator (the `keel` binary). Results: bench-results/compare.json
# and a table on stdout, with a fourth row per level: the gRPC echo
# ceiling (below).
#
#   scripts/bench-compare.sh                          # 3 trials x 10 s per level
#   scripts/bench-compare.sh --trials 5 --level-secs 20 --writers 1,64
#   scripts/bench-compare.sh --connections shared     # one connection per system
#
# Extra flags go to `keel bench compare`. Needs Debian's `zookeeper` and
# `etcd-server` packages (installed here with apt-get when missing, which
# needs root; otherwise run `sudo apt-get install -y zookeeper etcd-server`
# first). Takes about (trials x levels x 3 x level-secs) + ~1 min.
#
# Exact setup (also recorded in the JSON `setup` field):
# - ZooKeeper (Debian `zookeeper`, 3.8.0 on bookworm): 3 servers on
#   127.0.21.1-3, client port 2181, quorum port 2888, election port 3888,
#   started with Debian's /usr/share/zookeeper/bin/zkServer.sh
#   start-foreground (OpenJDK from `default-jre-headless`, Debian's classpath
#   and JVM options, SERVER_JVMFLAGS=-Xmx1000m: upstream zkServer.sh's default
#   heap). zoo.cfg: tickTime=2000 initLimit=10 syncLimit=5, own temp dataDir
#   (transaction log in it) with a `myid` file, everything else default --
#   forceSync=yes (fsync of the transaction log before acknowledging),
#   snapCount=100000, globalOutstandingLimit=1000 -- plus
#   4lw.commands.whitelist=srvr,stat,ruok (leader discovery),
#   admin.enableServer=false (the Jetty admin server would bind :8080 on all
#   three) and maxClientCnxns=0 (the default 60 per client IP is below 64
#   writers; every connection comes from 127.0.0.1).
#   Op: create of the persistent znode /keel-bench/w<writer>-<seq> holding a
#   100-byte value (one znode per partition state, as the classic controller
#   kept them), one session per writer, connected to the leader (with
#   --connections shared: one session for all writers, requests pipelined
#   in order and matched to replies by xid, as the Java client does).
# - etcd (Debian `etcd-server`, 3.4.23 on bookworm): 3 members on
#   127.0.22.1-3, client port 2379, peer port 2380, /usr/bin/etcd with only
#   the addressing flags below and an own temp --data-dir; everything else
#   default (WAL fsynced before acknowledging, --snapshot-count 100000,
#   --heartbeat-interval 100, --election-timeout 1000, no auto-compaction).
#   Op: Put of /keel-bench/w<writer> with a 100-byte value, one gRPC
#   connection per writer, to the leader (shared: one connection, a stream
#   per Put).
# - Keel: 3 controllers on 127.0.20.11-13 started by the bench itself with
#   --session-timeout-ms 600000; op: IncrementalAlterConfigs SET of
#   bench.k<writer> with a 100-byte value (one TopicConfig record), one gRPC
#   connection and `Write` session per writer to the active controller
#   (shared: one connection and one session for all writers, each write a
#   message tagged with its id).
# - grpc-echo, the transport ceiling: one `keel-lab bench-echo-server` process
#   on 127.0.23.1 (started and stopped by the bench; --no-echo leaves it
#   out) whose EchoService.Echo stream sends every message straight back;
#   op: one 100-byte message out and back on the writer's own stream (its
#   own connection, or with --connections shared one connection for all
#   writers, a stream each). No consensus, no disk: what one gRPC round
#   trip per op allows here, the bound for any gRPC server on this machine.
# - Before the run the bench times the disk (JSON `disk_probe`): a 4 KiB
#   overwrite + fdatasync, and 128 KiB appends + fdatasync for a second.
# - All three: data on the same filesystem (the temp dir), 2 of 3 nodes
#   acknowledge every write durably, one op in flight per writer; inside
#   each trial every writer level runs zookeeper, then etcd, then keel.
set -euo pipefail
cd "$(dirname "$0")/.."

zk_ips=(127.0.21.1 127.0.21.2 127.0.21.3)
etcd_ips=(127.0.22.1 127.0.22.2 127.0.22.3)
zk_client_port=2181
zk_quorum_port=2888
zk_election_port=3888
etcd_client_port=2379
etcd_peer_port=2380
zk_heap=-Xmx1000m
zk_server_sh=/usr/share/zookeeper/bin/zkServer.sh
etcd_bin=/usr/bin/etcd

say() { echo "[bench-compare] $*" >&2; }

# -- packages --------------------------------------------------------------
if [[ ! -x $zk_server_sh || ! -x $etcd_bin ]] || ! command -v java >/dev/null; then
    if [[ $(id -u) -ne 0 ]]; then
        say "zookeeper and etcd-server are not installed and this is not root:"
        say "run 'sudo apt-get install -y zookeeper etcd-server', then this script again"
        exit 1
    fi
    say "installing Debian's zookeeper and etcd-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y zookeeper etcd-server ||
        { apt-get update && apt-get install -y zookeeper etcd-server; }
fi

cargo build --release
keel=target/release/keel

# -- lifecycle -------------------------------------------------------------
work=$(mktemp -d /tmp/keel-bench-compare.XXXXXX)
server_pids=()

cleanup() {
    local rc=$? pid left i
    trap - EXIT INT TERM
    for pid in "${server_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    # Bounded wait (10 s), then SIGKILL what is left.
    for ((i = 0; i < 100; i++)); do
        left=0
        for pid in "${server_pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && left=1
        done
        ((left)) || break
        sleep 0.1
    done
    for pid in "${server_pids[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    # The bench kills its Keel controllers and echo server itself; if it was
    # killed first, they (127.0.20.11-13 and 127.0.23.1 are this scenario's)
    # go here.
    pkill -KILL -f -- "--listen 127\.0\.(20\.1[123]|23\.1):" 2>/dev/null || true
    if [[ $rc -ne 0 && -d $work ]]; then
        for f in "$work"/*/server.log; do
            [[ -f $f ]] && { say "last lines of $f:"; tail -n 5 "$f" >&2; }
        done
    fi
    rm -rf "$work"
    sleep 0.2
    if pgrep -f -- "$work" >/dev/null || pgrep -f -- "--listen 127\.0\.(20\.1[123]|23\.1):" >/dev/null; then
        say "WARNING: processes left behind:"
        pgrep -af -- "$work|--listen 127\.0\.(20\.1[123]|23\.1):" >&2 || true
        rc=1
    else
        say "all ZooKeeper, etcd and Keel processes of this run are gone"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_free() { ! (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
for ip in "${zk_ips[@]}"; do
    for port in $zk_client_port $zk_quorum_port $zk_election_port; do
        port_free "$ip" "$port" || { say "$ip:$port is already in use"; exit 1; }
    done
done
for ip in "${etcd_ips[@]}"; do
    for port in $etcd_client_port $etcd_peer_port; do
        port_free "$ip" "$port" || { say "$ip:$port is already in use"; exit 1; }
    done
done

# -- ZooKeeper ensemble ----------------------------------------------------
zk_servers=""
for i in 1 2 3; do
    zk_servers+="server.$i=${zk_ips[i - 1]}:$zk_quorum_port:$zk_election_port"$'\n'
done
zk_endpoints=()
for i in 1 2 3; do
    d=$work/zk$i
    mkdir -p "$d/data"
    echo "$i" >"$d/data/myid"
    cat >"$d/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$d/data
clientPort=$zk_client_port
clientPortAddress=${zk_ips[i - 1]}
maxClientCnxns=0
4lw.commands.whitelist=srvr,stat,ruok
admin.enableServer=false
$zk_servers
EOF
    SERVER_JVMFLAGS=$zk_heap "$zk_server_sh" start-foreground "$d/zoo.cfg" \
        >"$d/server.log" 2>&1 </dev/null &
    server_pids+=($!)
    zk_endpoints+=("${zk_ips[i - 1]}:$zk_client_port")
done

# -- etcd cluster ----------------------------------------------------------
etcd_cluster=""
for i in 1 2 3; do
    etcd_cluster+="${etcd_cluster:+,}e$i=http://${etcd_ips[i - 1]}:$etcd_peer_port"
done
etcd_endpoints=()
etcd_flags_doc=""
for i in 1 2 3; do
    d=$work/etcd$i
    mkdir -p "$d"
    ip=${etcd_ips[i - 1]}
    flags=(
        --name "e$i"
        --data-dir "$d/data"
        --listen-client-urls "http://$ip:$etcd_client_port"
        --advertise-client-urls "http://$ip:$etcd_client_port"
        --listen-peer-urls "http://$ip:$etcd_peer_port"
        --initial-advertise-peer-urls "http://$ip:$etcd_peer_port"
        --initial-cluster "$etcd_cluster"
        --initial-cluster-token keel-bench-compare
        --initial-cluster-state new
    )
    [[ $i -eq 1 ]] && etcd_flags_doc="${flags[*]}"
    "$etcd_bin" "${flags[@]}" >"$d/server.log" 2>&1 </dev/null &
    server_pids+=($!)
    etcd_endpoints+=("http://$ip:$etcd_client_port")
done

# -- wait until both are healthy (bounded: 60 s) ----------------------------
srvr() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$zk_client_port; printf srvr >&3; cat <&3" 2>/dev/null || true; }
deadline=$((SECONDS + 60))
while :; do
    modes=""
    for ip in "${zk_ips[@]}"; do
        modes+="$(srvr "$ip" | sed -n 's/^Mode: //p') "
    done
    etcd_ok=0
    for e in "${etcd_endpoints[@]}"; do
        curl -fsS -m 2 "$e/health" 2>/dev/null | grep -q '"health":"true"' && etcd_ok=$((etcd_ok + 1))
    done
    if [[ $modes == *leader* && $(grep -o follower <<<"$modes" | wc -l) -eq 2 && $etcd_ok -eq 3 ]]; then
        break
    fi
    for pid in "${server_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || { say "a server exited during start-up"; exit 1; }
    done
    if ((SECONDS >= deadline)); then
        say "not healthy within 60 s: ZooKeeper modes [$modes], etcd healthy members $etcd_ok/3"
        exit 1
    fi
    sleep 0.5
done

zk_version=$(srvr "${zk_ips[0]}" | sed -n 's/^Zookeeper version: //p')
etcd_version=$("$etcd_bin" --version | tr '\n' ' ')
java_version=$(java -version 2>&1 | head -n 1)
say "ZooKeeper $zk_version, modes: $modes"
say "etcd: $etcd_version"

export KEEL_BENCH_COMPARE_SETUP="started by scripts/bench-compare.sh
packages: $(dpkg-query -W -f='${Package} ${Version}; ' zookeeper etcd-server 2>/dev/null || echo unknown)
zookeeper: version $zk_version; $java_version; $zk_server_sh start-foreground <zoo.cfg> with SERVER_JVMFLAGS=$zk_heap
zoo.cfg (server 1): $(grep -v '^$' "$work/zk1/zoo.cfg" | sed "s|$work|<tmp>|" | tr '\n' ' ')
etcd: $etcd_version
etcd flags (member 1): ${etcd_flags_doc//$work/<tmp>}
data: temp dirs under /tmp on $(df -T /tmp | awk 'NR==2 {print $2}') ($(df /tmp | awk 'NR==2 {print $1}'))"

"$keel" bench compare \
    --zookeeper "$(IFS=,; echo "${zk_endpoints[*]}")" \
    --etcd "$(IFS=,; echo "${etcd_endpoints[*]}")" \
    "$@"
