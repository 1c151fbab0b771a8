#!/usr/bin/env bash
# bench/schedules.sh — the cost of schedules (issue 33 point 10), on loopback.
#
#   bench/schedules.sh [TRIGD]    TRIGD: the binary (default: cargo static's)
#
# 1. Lateness: N schedules (BENCH_SCHEDULES, default 1000) firing every
#    minute on one function (`true`) — every second with
#    BENCH_SCHED_EVERY=second (bench/run.sh --quick) — while wrk keeps sync
#    `/bin/true` runs going on the same server over 8 connections (when wrk
#    is installed; BENCH_SCHED_LOAD=0: none). After FIRINGS occurrences
#    (default 2) the histogram trigd_schedule_lateness_seconds of /metrics
#    gives the share of firings accepted within 50 ms of their occurrence.
# 2. Idle: 10,000 schedules that fire once a year against none: CPU time of
#    the trigd process over IDLE seconds (default 30) and resident memory.
# Prints the table rows, then one line for bench/run.sh:
#   RESULT firings=F within50=W syncrps=R idlecpu=P kib0=A kib10k=B
# Stops only the processes it started.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRIGD=${1:-$ROOT/target/x86_64-unknown-linux-gnu/release/trigd}
N=${BENCH_SCHEDULES:-1000}
FIRINGS=${BENCH_FIRINGS:-2}
IDLE=${BENCH_IDLE:-30}
EVERY=${BENCH_SCHED_EVERY:-minute}
LOAD=${BENCH_SCHED_LOAD:-1}
KEY=bench-schedules-key
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# setup DIR COUNT CRON: a config with an API key, program 1 with COUNT
# schedules, program 2 for the sync load.
setup() {
    local dir=$1 count=$2 cron=$3 port
    port=$(free_port)
    mkdir -p "$dir/programs"
    printf '[server]\nlisten = "127.0.0.1:%s"\nmax_queued_runs = 100000\nrun_retention = 100000\n\n[[api_keys]]\nname = "bench"\nsha256 = "%s"\n' \
        "$port" "$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)" >"$dir/config.toml"
    {
        printf 'id = 1\nname = "bench"\n[[functions]]\nname = "tick"\ncommand = ["true"]\n'
        for ((i = 0; i < count; i++)); do
            printf '[[functions.schedules]]\nname = "s%d"\ncron = "%s"\n' "$i" "$cron"
        done
    } >"$dir/programs/bench.toml"
    printf 'id = 2\nname = "load"\n[[functions]]\nname = "run"\ncommand = ["/bin/true"]\n[functions.webhook]\n' \
        >"$dir/programs/load.toml"
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
if [[ $EVERY == second ]]; then
    cron="* * * * * *"
else
    cron="* * * * *"
fi
port=$(setup "$WORK/late" "$N" "$cron")
pid=$(start "$WORK/late")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
if [[ $EVERY == second ]]; then
    wait_s=$((FIRINGS + 1))
else
    wait_s=$(((60 - $(date +%-S)) + 60 * (FIRINGS - 1) + 5))
fi
echo "lateness: $N schedules every $EVERY, waiting ${wait_s}s for $FIRINGS firings each" >&2
rps=nan
if ((LOAD)) && command -v wrk >/dev/null; then
    wrk -t2 -c8 -d"${wait_s}s" -s "$ROOT/bench/post.lua" \
        "http://127.0.0.1:$port/api?api_key=$KEY&program_id=2" >"$WORK/wrk.out" 2>&1 || true
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk.out")
else
    sleep "$wait_s"
fi
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
fired=$(awk '/^trigd_schedule_lateness_seconds_count/ {print $2}' <<<"$metrics")
within=$(awk -F'[ "]' '/^trigd_schedule_lateness_seconds_bucket\{le="0.05"\}/ {print $NF}' <<<"$metrics")
kill "$pid"
# BENCH_SCHED_LOG=FILE: keep the server's log (with RUST_LOG=trigd::schedule=debug:
# each wake's stages).
if [[ -n ${BENCH_SCHED_LOG:-} ]]; then cp "$WORK/late/log" "$BENCH_SCHED_LOG"; fi
echo "| $N schedules, every $EVERY, sync load ${rps:-nan} req/s | firings: $fired | within 50 ms: $within ($(awk -v a="$within" -v b="$fired" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / b }')) |"
grep '^trigd_schedule_lateness_seconds_bucket' <<<"$metrics" >&2

# ------------------------------------------------------------------- idle
declare -A kib cpu
for count in 0 10000; do
    port=$(setup "$WORK/idle$count" "$count" "0 0 1 1 *")
    pid=$(start "$WORK/idle$count")
    sleep 5
    t0=$(cpu_ticks "$pid")
    sleep "$IDLE"
    t1=$(cpu_ticks "$pid")
    hz=$(getconf CLK_TCK)
    kib[$count]=$(rss_kb "$pid")
    cpu[$count]=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v s="$IDLE" 'BEGIN { printf "%.2f", 100 * t / hz / s }')
    echo "| $count idle schedules | CPU over ${IDLE}s: ${cpu[$count]}% of a core | RSS: ${kib[$count]} KiB |"
    kill "$pid"
done
echo "RESULT firings=${fired:-0} within50=${within:-0} syncrps=${rps:-nan} idlecpu=${cpu[10000]} kib0=${kib[0]} kib10k=${kib[10000]}"
