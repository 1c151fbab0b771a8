#!/usr/bin/env bash
# bench/cluster.sh — sync runs per second through HAProxy (dist/haproxy.cfg)
# with 1, 2 and 3 trigd instances on this machine, plus 1 instance without
# the balancer. All on loopback; the instances share this machine's cores.
#
#   bench/cluster.sh [SECONDS]     (default 8 per case; needs haproxy, wrk)
#
# Builds trigd with `cargo build --release`; stops only what it started.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECS=${1:-8}
CONNS=16
KEY=bench-cluster-key-5a1e
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
WORK=$(mktemp -d /tmp/trigd-cluster-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
BIN=$ROOT/target/release/trigd
SHA=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_instance NAME PORT
start_instance() {
    local dir=$WORK/$1
    mkdir -p "$dir/programs"
    cat >"$dir/config.toml" <<EOF
[server]
instance = "$1"
max_concurrent_runs = 16
trusted_proxies = ["127.0.0.1"]
[[api_keys]]
name = "bench"
sha256 = "$SHA"
EOF
    cat >"$dir/programs/p.toml" <<'EOF'
id = 1
name = "echo"
[[functions]]
name = "echo"
command = ["/bin/echo", "ok"]
[functions.webhook]
EOF
    RUST_LOG=warn "$BIN" serve --config "$dir/config.toml" --listen "127.0.0.1:$2" >/dev/null 2>"$dir/stderr.log" &
    PIDS+=($!)
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/healthz" >/dev/null && return; sleep 0.1; done
    echo "instance $1 did not start" >&2; exit 1
}

# measure URL → runs/s (200 answers per second)
measure() {
    local out
    out=$(wrk -t2 -c$CONNS -d"${SECS}s" -s "$ROOT/bench/post.lua" "$1")
    local dur ok
    dur=$(awk '/^WRKSUM/ {print $2}' <<<"$out")
    ok=$(awk '/^STATUS 200/ {print $3}' <<<"$out")
    local other
    other=$(awk '/^STATUS/ && $2 != 200 {printf "%s:%s ", $2, $3}' <<<"$out")
    awk -v ok="${ok:-0}" -v d="$dur" -v o="$other" 'BEGIN {printf "%.0f runs/s%s\n", ok / (d / 1e6), (o == "" ? "" : "  (other: " o ")")}'
}

path="/api?api_key=$KEY&program_id=1"
ports=()
names=(b1 b2 b3)
for i in 0 1 2; do ports+=("$(free_port)"); start_instance "${names[$i]}" "${ports[$i]}"; done

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
echo "1 instance, no balancer: $(measure "http://127.0.0.1:${ports[0]}$path")"

for n in 1 2 3; do
    lb=$(free_port)
    cfg=$WORK/haproxy-$n.cfg
    servers=""
    for i in $(seq 0 $((n - 1))); do
        servers+="    server ${names[$i]} 127.0.0.1:${ports[$i]}\n"
    done
    sed -e "s#/run/haproxy/trigd.sock#$WORK/hx-$n.sock#" -e "s#    bind :80#    bind 127.0.0.1:$lb#" \
        -e '/^    server web[123] /d' -e 's#^    log stdout.*#    log stderr format raw local0 warning#' \
        "$ROOT/dist/haproxy.cfg" >"$cfg"
    printf "$servers" >>"$cfg"
    "$HAPROXY" -db -f "$cfg" >/dev/null 2>"$WORK/haproxy-$n.log" &
    hpid=$!
    PIDS+=("$hpid")
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$lb/healthz" >/dev/null && break; sleep 0.1; done
    sleep 3 # let every server pass `rise 2` health checks (inter 2s)
    echo "$n instance(s) behind HAProxy: $(measure "http://127.0.0.1:$lb$path")"
    kill "$hpid"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
