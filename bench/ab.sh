#!/usr/bin/env bash
# bench/ab.sh — two or more trigd builds (or settings) against each other,
# interleaved, on one case of bench/run.sh.
#
#   bench/ab.sh [-c CASE] [-r ROUNDS] [-s SECONDS] LABEL=BINARY[,VAR=VALUE...] ...
#
# CASE: true1, true8 (default), true32, echo8, echo32 or reject8, as in
# bench/run.sh, or tls_true8, tls_reject8 (keep-alive over HTTPS) or
# tls_new8 (rejected, `Connection: close`: a full handshake per request),
# with a P-256 certificate made by openssl. Every variant is started once on the same configuration;
# then each round measures each of them with wrk for SECONDS (the order
# rotates from round to round), and the table gives per variant the median
# req/s, p50 and p99 over the rounds with their spread (min–max), trigd's
# own CPU time per call (user and system, µs, from /proc/PID/stat around
# each round; its children not counted), its idle VmRSS (0.5 s after the
# first 200) and its VmRSS and VmHWM at the end.
# VAR=VALUE pairs go into that variant's environment, except MAX_RUNS=N,
# which sets its max_concurrent_runs (default: trigd's own), and
# RETENTION=N, its run_retention. Needs wrk and curl.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/trigd-config.sh
source "$BENCH_DIR/trigd-config.sh"

CASE=true8 ROUNDS=5 SECS=5
while getopts c:r:s:h opt; do
    case $opt in
    c) CASE=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    s) SECS=$OPTARG ;;
    *) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
(($# >= 2)) || { echo "ab.sh: give at least two variants" >&2; exit 2; }

KEY="bench-key-4f1c2a9e7d3b"
SHA=$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)
case $CASE in
true1) CONNS=1 PATH_Q="/api?api_key=$KEY&program_id=1" ;;
true8) CONNS=8 PATH_Q="/api?api_key=$KEY&program_id=1" ;;
true32) CONNS=32 PATH_Q="/api?api_key=$KEY&program_id=1" ;;
echo8) CONNS=8 PATH_Q="/api?api_key=$KEY&program_id=2&variables=hello&variables=world" ;;
echo32) CONNS=32 PATH_Q="/api?api_key=$KEY&program_id=2&variables=hello&variables=world" ;;
reject8) CONNS=8 PATH_Q="/api?api_key=wrong-$KEY&program_id=1" ;;
tls_true8) CONNS=8 PATH_Q="/api?api_key=$KEY&program_id=1" ;;
tls_reject8 | tls_new8) CONNS=8 PATH_Q="/api?api_key=wrong-$KEY&program_id=1" ;;
*) echo "ab.sh: unknown case $CASE" >&2; exit 2 ;;
esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trigd-ab.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
# In a directory of its own, as in bench/run.sh (trigd watches it).
mkdir -p "$WORK/secrets"
printf 'secret\n' >"$WORK/secrets/secret"
SCHEME=http HEADER=()
if [[ $CASE == tls_* ]]; then
    SCHEME=https
    [[ $CASE == tls_new8 ]] && HEADER=(-H "Connection: close")
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/key.pem" \
        -out "$WORK/cert.pem" -days 30 -subj /CN=localhost 2>/dev/null
fi

mem_of() { awk '/^VmRSS:/ {r=$2} /^VmHWM:/ {h=$2} END {print r+0, h+0}' "/proc/$1/status"; }
# utime and stime of process $1 in clock ticks (fields 14 and 15, counted
# after the command name, which may hold spaces).
cpu_of() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12, $13}'; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {
    if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
spread() { printf '%s\n' "$@" | sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {print lo "–" hi}'; }

LABELS=() PORTS=() SPIDS=()
declare -A RPS P50 P99 USR SYS
i=0
for spec in "$@"; do
    label=${spec%%=*} rest=${spec#*=}
    IFS=, read -r -a parts <<<"$rest"
    bin=${parts[0]} envs=("${parts[@]:1}")
    dir=$WORK/v$i
    max_runs=""
    retention=""
    for e in "${envs[@]+"${envs[@]}"}"; do
        [[ $e == MAX_RUNS=* ]] && max_runs=${e#MAX_RUNS=}
        [[ $e == RETENTION=* ]] && retention=${e#RETENTION=}
    done
    write_trigd_config "$dir" "$SHA" "$max_runs" "$WORK/secrets/secret" "$WORK/async$i.out" "$WORK/once$i.out"
    [[ -n $retention ]] && sed -i "s|^\[server\]\$|[server]\nrun_retention = $retention|" "$dir/config.toml"
    [[ $SCHEME == https ]] &&
        sed -i "s|^\[server\]\$|[server]\ntls_cert = \"$WORK/cert.pem\"\ntls_key = \"$WORK/key.pem\"|" "$dir/config.toml"
    env "${envs[@]+"${envs[@]}"}" "$bin" serve --config "$dir/config.toml" --listen 127.0.0.1:0 \
        >"$dir.out" 2>/dev/null &
    pid=$!
    PIDS+=("$pid")
    for ((t = 0; t < 600; t++)); do
        grep -q '^listening on' "$dir.out" 2>/dev/null && break
        sleep 0.05
    done
    port=$(sed -n "s/^listening on $SCHEME:\/\/127.0.0.1:\([0-9]*\).*/\1/p" "$dir.out")
    [[ -n $port ]] || { echo "ab.sh: $label did not start" >&2; exit 1; }
    until curl -sfk "$SCHEME://127.0.0.1:$port/healthz" >/dev/null; do sleep 0.05; done
    sleep 0.5
    read -r rss _ < <(mem_of "$pid")
    LABELS+=("$label") PORTS+=("$port") SPIDS+=("$pid")
    IDLE[$i]=$rss
    i=$((i + 1))
done

n=${#LABELS[@]}
for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        v=$(((k + r) % n))
        out=$WORK/wrk-$v-$r.txt
        threads=2
        ((CONNS < 2)) && threads=1
        read -r u0 s0 < <(cpu_of "${SPIDS[$v]}")
        wrk -t$threads -c"$CONNS" -d"${SECS}s" --latency --timeout 10s \
            -s "$BENCH_DIR/post.lua" "${HEADER[@]+"${HEADER[@]}"}" \
            "$SCHEME://127.0.0.1:${PORTS[$v]}$PATH_Q" >"$out" 2>&1 || true
        read -r rps p50 p99 calls < <(awk '
            function ms(v) {
                if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000
                if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
                if (v ~ /s$/)  return substr(v, 1, length(v) - 1) * 1000
                return v + 0
            }
            $1 == "50%" { p50 = ms($2) }
            $1 == "99%" { p99 = ms($2) }
            $1 == "WRKSUM" { dur = $2 / 1e6; total = $3 }
            END { printf "%.1f %.3f %.3f %d\n", (dur > 0 ? total / dur : 0), p50, p99, total }' "$out")
        read -r u1 s1 < <(cpu_of "${SPIDS[$v]}")
        read -r usr sys < <(awk -v n="$calls" -v t="$TICK_US" -v du=$((u1 - u0)) -v ds=$((s1 - s0)) \
            'BEGIN { if (n > 0) printf "%.0f %.0f\n", du * t / n, ds * t / n; else print "0 0" }')
        RPS[$v]="${RPS[$v]:-} $rps" P50[$v]="${P50[$v]:-} $p50" P99[$v]="${P99[$v]:-} $p99"
        USR[$v]="${USR[$v]:-} $usr" SYS[$v]="${SYS[$v]:-} $sys"
        echo "round $((r + 1)) ${LABELS[$v]}: $rps req/s p50 $p50 ms p99 $p99 ms, trigd CPU/call user $usr µs sys $sys µs" >&2
    done
done

echo "case $CASE ($CONNS conns), $ROUNDS rounds x ${SECS}s, load at end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %s | %s | %s | %s | %s | %s | %s |\n' variant "req/s median (min–max)" "p50 ms" \
    "p99 ms median (min–max)" "trigd CPU/call µs user / sys (sys min–max)" "idle VmRSS KiB" \
    "VmRSS / VmHWM at end KiB"
echo "|---|---:|---:|---:|---:|---:|---:|"
for ((v = 0; v < n; v++)); do
    read -r rss hwm < <(mem_of "${SPIDS[$v]}")
    # shellcheck disable=SC2086
    printf '| %s | %s (%s) | %s | %s (%s) | %s / %s (%s) | %s | %s / %s |\n' "${LABELS[$v]}" \
        "$(median ${RPS[$v]})" "$(spread ${RPS[$v]})" "$(median ${P50[$v]})" \
        "$(median ${P99[$v]})" "$(spread ${P99[$v]})" "$(median ${USR[$v]})" \
        "$(median ${SYS[$v]})" "$(spread ${SYS[$v]})" "${IDLE[$v]}" "$rss" "$hwm"
done
