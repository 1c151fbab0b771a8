#!/usr/bin/env bash
# bench/schedules.sh — the cost of schedules (issue 33 point 10), on loopback.
#
#   bench/schedules.sh [TRIGD]    TRIGD: the binary (default: cargo static's)
#
# 1. Lateness: N schedules (BENCH_SCHEDULES, default 1000) firing every
#    minute on one function (`true`); after FIRINGS minutes (default 2) the
#    histogram trigd_schedule_lateness_seconds of /metrics gives the share of
#    firings accepted within 50 ms of their occurrence.
# 2. Idle: 10,000 schedules that fire once a year against none: CPU time of
#    the trigd process over IDLE seconds (default 30) and resident memory.
# Stops only the processes it started.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRIGD=${1:-$ROOT/target/x86_64-unknown-linux-gnu/release/trigd}
N=${BENCH_SCHEDULES:-1000}
FIRINGS=${BENCH_FIRINGS:-2}
IDLE=${BENCH_IDLE:-30}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# setup DIR COUNT CRON: a config and one program with COUNT schedules.
setup() {
    local dir=$1 count=$2 cron=$3 port
    port=$(free_port)
    mkdir -p "$dir/programs"
    printf '[server]\nlisten = "127.0.0.1:%s"\nmax_queued_runs = 100000\nrun_retention = 100000\n' "$port" >"$dir/config.toml"
    {
        printf 'id = 1\nname = "bench"\n[[functions]]\nname = "tick"\ncommand = ["true"]\n'
        for ((i = 0; i < count; i++)); do
            printf '[[functions.schedules]]\nname = "s%d"\ncron = "%s"\n' "$i" "$cron"
        done
    } >"$dir/programs/bench.toml"
    echo "$port"
}

# start DIR: trigd on DIR in the background; its pid.
start() {
    "$TRIGD" --config "$1/config.toml" >"$1/log" 2>&1 &
    PIDS+=($!)
    echo $!
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# --------------------------------------------------------------- lateness
port=$(setup "$WORK/late" "$N" "* * * * *")
pid=$(start "$WORK/late")
sleep 2
wait_s=$(( (60 - $(date +%-S)) + 60 * FIRINGS + 5 ))
echo "lateness: $N schedules every minute, waiting ${wait_s}s for $FIRINGS firings each" >&2
sleep "$wait_s"
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
count=$(awk '/^trigd_schedule_lateness_seconds_count/ {print $2}' <<<"$metrics")
within=$(awk -F'[ "]' '/^trigd_schedule_lateness_seconds_bucket\{le="0.05"\}/ {print $NF}' <<<"$metrics")
kill "$pid"
echo "| $N schedules, every minute | firings: $count | within 50 ms: $within ($(awk -v a="$within" -v b="$count" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / b }')) |"
grep '^trigd_schedule_lateness_seconds_bucket' <<<"$metrics" >&2

# ------------------------------------------------------------------- idle
for count in 0 10000; do
    port=$(setup "$WORK/idle$count" "$count" "0 0 1 1 *")
    pid=$(start "$WORK/idle$count")
    sleep 5
    t0=$(cpu_ticks "$pid")
    sleep "$IDLE"
    t1=$(cpu_ticks "$pid")
    hz=$(getconf CLK_TCK)
    rss=$(rss_kb "$pid")
    echo "| $count idle schedules | CPU over ${IDLE}s: $(awk -v t=$((t1 - t0)) -v hz="$hz" -v s="$IDLE" 'BEGIN { printf "%.2f%% of a core", 100 * t / hz / s }') | RSS: ${rss} KiB |"
    kill "$pid"
done
