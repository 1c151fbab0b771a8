#!/usr/bin/env bash
# bench/run.sh — trigd vs adnanh/webhook on this machine, on loopback only.
#
#   bench/run.sh            full run (~5 min + the static build), writes bench/RESULTS.md
#   bench/run.sh --quick    smoke run (~1 min), writes bench/RESULTS.quick.md
#
# What each case measures and every knob: bench/README.md.
# Installs webhook, wrk (and cc, curl) with apt-get when missing, builds trigd
# with `cargo static` (the statically linked binary operators run), starts
# both servers on 127.0.0.1 with equivalent definitions, drives them with wrk
# interleaved A/B/A/B, prints a table of medians and ratios. Stops only the
# processes it started (PIDs tracked, trap EXIT).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/trigd-config.sh
source "$BENCH_DIR/trigd-config.sh"
# shellcheck source=bench/pg.sh
source "$BENCH_DIR/pg.sh"
ROOT=$(cd "$BENCH_DIR/.." && pwd)

usage() {
    sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

QUICK=0
for arg in "$@"; do
    case $arg in
    --quick) QUICK=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument: $arg" >&2; usage >&2; exit 2 ;;
    esac
done

if [[ ${CI:-} == true && -z ${BENCH_FORCE:-} ]]; then
    echo "bench/run.sh: not run in CI (CI=true); set BENCH_FORCE=1 to run anyway"
    exit 0
fi

# ---------------------------------------------------------------- settings
if ((QUICK)); then
    d_seconds=1 d_rounds=1 d_async=2 d_async_rounds=1 d_programs=1000 d_start=1 d_reload=2 d_warmup=0 d_output=20 d_runlist=100000
    d_results=$BENCH_DIR/RESULTS.quick.md
else
    d_seconds=5 d_rounds=3 d_async=10 d_async_rounds=2 d_programs=10000 d_start=9 d_reload=11 d_warmup=1 d_output=100 d_runlist=1000000
    d_results=$BENCH_DIR/RESULTS.md
fi
SECS=${BENCH_SECONDS:-$d_seconds}              # one wrk measurement
ROUNDS=${BENCH_ROUNDS:-$d_rounds}              # A/B pairs per case; medians over these
ASYNC_SECS=${BENCH_ASYNC_SECONDS:-$d_async}    # one async-accept measurement
ASYNC_ROUNDS=${BENCH_ASYNC_ROUNDS:-$d_async_rounds} # A/B pairs for the async case
NPROGRAMS=${BENCH_PROGRAMS:-$d_programs}       # program files / hooks for the start-up case
START_TRIALS=${BENCH_START_TRIALS:-$d_start}   # start-ups per server
RELOAD_TRIALS=${BENCH_RELOAD_TRIALS:-$d_reload} # reloads per server
WARMUP=${BENCH_WARMUP:-$d_warmup}              # seconds of wrk per server before measuring
ONLY=${BENCH_ONLY:-}                           # cases to run (names, space-separated); empty: all
[[ -n $ONLY ]] && d_results=$BENCH_DIR/RESULTS.only.md
RESULTS=${BENCH_RESULTS:-$d_results}
SKIP_TRIGD=${BENCH_SKIP_TRIGD:-0}              # 1: webhook side + floor only (development aid)
MAX_RUNS=${BENCH_MAX_RUNS:-}                    # trigd max_concurrent_runs (empty: its default)
# The slots trigd runs with (max_concurrent_runs, max_concurrent_async_runs),
# as the main trigd reports them in /metrics once started: its default
# depends on the cores it may use, which only trigd knows for sure.
SLOTS=nan ASYNC_SLOTS=nan
KEY="bench-key-4f1c2a9e7d3b"                   # fixed API key; config holds its sha256

# want CASE: whether BENCH_ONLY (empty: every case) names CASE
want() { [[ -z $ONLY || " $ONLY " == *" $1 "* ]]; }

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; FAILED=1; exit 1; }

# ---------------------------------------------------------------- processes
PIDS=()
WORK=""
FAILED=0
CASE_ERRORS=() # a case that ran but measured nothing: the run fails (CI runs --quick)
stop_pid() { # PID: SIGTERM, up to 5 s, then SIGKILL; only PIDs this script started
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        snooze 0.05
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
}
forget_pid() { # PID: drop from PIDS after it was stopped
    local p keep=()
    for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]+"${keep[@]}"}")
}
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do stop_pid "$p"; done
    pg_cleanup
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ -n ${BENCH_KEEP:-} ]] || ((FAILED)); then
            log "work directory kept: $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# sleep without forking: read with a timeout on a FIFO nobody writes to
snooze() { read -r -t "$1" -u 9 _ 2>/dev/null || true; }
now_us() { NOW_US=${EPOCHREALTIME//[.,]/}; }

# HTTP without forking (bash /dev/tcp): METHOD PORT PATH -> HTTP_STATUS (000: no connection)
http_status() {
    local _v _s
    HTTP_STATUS=000
    {
        printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n' \
            "$1" "$3" "$2" >&3
        IFS=' ' read -r -t 5 _v _s _ <&3 && HTTP_STATUS=$_s
    } 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$2" || true
}
port_open() { { :; } 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$1"; }

# ---------------------------------------------------------------- numbers
median() { printf '%s\n' "$@" | awk NF | sort -g | awk '{a[NR]=$1} END {
    if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
calc() { awk "BEGIN { printf \"%s\", $1 }"; }            # calc 'expr' (awk syntax)
fmt() { awk -v v="$1" -v f="$2" 'BEGIN { if (v == "nan" || v == "") print "n/a"; else printf f, v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || a == "" || b == "" || b+0 == 0) print "nan"; else printf "%.4f", a/b }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "nan" && b != "nan" && a != "" && b != "" && a+0 >= b+0) }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "nan" && b != "nan" && a != "" && b != "" && a+0 <= b+0) }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "nan" && b != "nan" && a != "" && b != "" && a+0 < b+0) }'; }

declare -A S # samples: S[key] = "v1 v2 ..."
add() { S[$1]="${S[$1]:-} $2"; }
med() { median ${S[$1]:-}; }

# ---------------------------------------------------------------- tools
install_missing() {
    local need=() sudo=""
    command -v webhook >/dev/null || need+=(webhook)
    command -v wrk >/dev/null || need+=(wrk)
    command -v cc >/dev/null || need+=(gcc)
    command -v curl >/dev/null || need+=(curl)
    command -v openssl >/dev/null || need+=(openssl)
    command -v pgrep >/dev/null || need+=(procps)
    if want pg; then # the PostgreSQL case (bench/pg.sh): its server binaries, HAProxy
        pg_bindir >/dev/null || need+=(postgresql)
        command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]] || need+=(haproxy)
    fi
    ((${#need[@]})) || return 0
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    log "installing ${need[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get install -y -q "${need[@]}" >&2 ||
        { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q "${need[@]}" >&2; } ||
        die "apt-get install ${need[*]} failed"
}

# ---------------------------------------------------------------- servers
# trigd_metric PORT NAME: a value of the trigd on PORT from /metrics; nan when
# it has none (a build from before 2026-11-29 has no slot gauges).
trigd_metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { v = $2 } END { print (v == "" ? "nan" : v) }'
}

# The static build is the one shipped: measure it, not the dynamic release
# build (they start steps differently in std, which once made the static one
# twice as slow without the bench noticing).
TRIGD=${BENCH_TRIGD:-$ROOT/target/x86_64-unknown-linux-gnu/release/trigd} # BENCH_TRIGD: use this binary, skip the build

# start_trigd DIR -> T_PID T_PORT STARTUP_US (exec to first 200 from /healthz)
# Its stdout and stderr go to DIR.trigd.out and DIR.trigd.err, beside DIR and
# not in it: trigd watches the config's directory, and a log file written
# there wakes its file watcher at every log line (about 1.2 more context
# switches per rejected request).
start_trigd() {
    local dir=$1 out=$1.trigd.out err=$1.trigd.err line="" t0 deadline
    : >"$out"
    now_us; t0=$NOW_US
    "$TRIGD" serve --config "$dir/config.toml" --listen 127.0.0.1:0 >"$out" 2>"$err" &
    T_PID=$!
    PIDS+=("$T_PID")
    deadline=$((t0 + ${START_BOUND_S:-60} * 1000000))
    # The port is known only from the listening line.
    while :; do
        if [[ -s $out ]]; then
            IFS= read -r line <"$out" || true
            [[ $line == "listening on http://"* ]] && break
        fi
        kill -0 "$T_PID" 2>/dev/null || die "trigd exited at start-up: $(tail -5 "$err")"
        now_us; ((NOW_US < deadline)) || die "trigd printed no listening line in 60 s"
        snooze 0.001
    done
    T_PORT=${line##*:}
    T_PORT=${T_PORT%%[!0-9]*}
    while :; do
        http_status GET "$T_PORT" /healthz
        [[ $HTTP_STATUS == 200 ]] && break
        kill -0 "$T_PID" 2>/dev/null || die "trigd exited at start-up: $(tail -5 "$err")"
        now_us; ((NOW_US < deadline)) || die "trigd /healthz not 200 within 60 s (last $HTTP_STATUS)"
        snooze 0.001
    done
    now_us
    STARTUP_US=$((NOW_US - t0))
}

# start_timed SIDE DIR [ARGS...] -> PID PORT STARTUP_US: SIDE is trigd
# (DIR/config.toml) or webhook (DIR/hooks.json, ARGS added to its command
# line). Both are started alike, on a free port chosen here, and timed alike:
# from just before the fork to the first 200 (trigd GET /healthz, webhook
# GET /), polling only that (no wait for trigd's listening line first, which
# would add a second polling interval to trigd's figure alone).
start_timed() {
    local side=$1 dir=$2 try port t0 deadline
    shift 2
    for ((try = 0; try < 10; try++)); do
        port=$((20000 + RANDOM % 40000))
        port_open "$port" && continue
        now_us; t0=$NOW_US
        if [[ $side == trigd ]]; then
            "$TRIGD" serve --config "$dir/config.toml" --listen "127.0.0.1:$port" \
                >"$dir.trigd.out" 2>"$dir.trigd.err" &
        else
            (cd "$dir" && exec webhook -hooks "$dir/hooks.json" -ip 127.0.0.1 -port "$port" "$@") \
                >"$dir/webhook.out" 2>"$dir/webhook.err" &
        fi
        PID=$!
        PIDS+=("$PID")
        deadline=$((t0 + 60000000))
        while :; do
            http_status GET "$port" "$([[ $side == trigd ]] && echo /healthz || echo /)"
            if [[ $HTTP_STATUS == 200 ]] && kill -0 "$PID" 2>/dev/null; then
                now_us
                STARTUP_US=$((NOW_US - t0))
                PORT=$port
                return 0
            fi
            kill -0 "$PID" 2>/dev/null || break # lost the port race: try another
            now_us; ((NOW_US < deadline)) || die "$side not answering within 60 s"
            snooze 0.001
        done
        wait "$PID" 2>/dev/null || true
        forget_pid "$PID"
    done
    die "$side did not start in $dir: $(tail -5 "$dir.trigd.err" "$dir/webhook.err" 2>/dev/null)"
}

# start_webhook DIR [ARGS...] -> W_PID W_PORT STARTUP_US (exec to first 200 from GET /)
start_webhook() {
    local dir=$1
    shift
    start_timed webhook "$dir" "$@"
    W_PID=$PID W_PORT=$PORT
}

# cpu_of PID -> CPU_SELF CPU_CHILD: the CPU time of process PID, user +
# system (fields 14 and 15 of /proc/PID/stat), and that of its children it
# has reaped (fields 16 and 17), in clock ticks; both empty when it is gone.
# Read without forking. The fields are counted after the command name's
# closing parenthesis (the name may hold spaces): field 3 is f[0].
cpu_of() {
    local stat f
    CPU_SELF="" CPU_CHILD=""
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
    read -r -a f <<<"${stat##*) }"
    CPU_SELF=$((f[11] + f[12])) CPU_CHILD=$((f[13] + f[14]))
}
TICK_US=$((1000000 / $(getconf CLK_TCK))) # one clock tick, µs (10 000 at CLK_TCK 100)
# per_call TICKS_BEFORE TICKS_AFTER CALLS -> µs of CPU a call ("nan" without
# calls or readings). The clock tick bounds the resolution: ±1 tick per
# reading, so ±0.7 µs a call for a 5 s round of 14,000 calls at 100 Hz.
per_call() {
    awk -v a="$1" -v b="$2" -v n="$3" -v us="$TICK_US" \
        'BEGIN { if (a == "" || b == "" || n + 0 <= 0) print "nan"; else printf "%.1f", (b - a) * us / n }'
}
# cpu_mark PID, then cpu_since KEY CALLS: the CPU PID spent in between, per
# call (µs), added to the samples KEY.cpu (its own) and KEY.ccpu (the
# children it reaped meanwhile), and left in CPU_CALL and CPU_CALL_CHILD.
cpu_mark() { CPU_PID=$1; cpu_of "$1"; CPU0_SELF=$CPU_SELF CPU0_CHILD=$CPU_CHILD; }
cpu_since() {
    cpu_of "$CPU_PID"
    CPU_CALL=$(per_call "$CPU0_SELF" "$CPU_SELF" "$2")
    CPU_CALL_CHILD=$(per_call "$CPU0_CHILD" "$CPU_CHILD" "$2")
    add "$1.cpu" "$CPU_CALL"
    add "$1.ccpu" "$CPU_CALL_CHILD"
}

# status PID -> "VmRSS_kB VmHWM_kB"
mem_of() { awk '/^VmRSS:/ {r=$2} /^VmHWM:/ {h=$2} END {print r+0, h+0}' "/proc/$1/status"; }

# settle_mem PID NAME: VmRSS and VmHWM 1 s after the first 200, into rss_NAME
# and hwm_NAME. The figure at the first 200 catches the start-up's garbage
# in flight (trigd's check of the watched files, webhook's unswept heap):
# it moved the ratio between 0.63x and 0.83x from run to run; the settled
# figure is what the server keeps while it serves.
settle_mem() {
    snooze 1
    local v h
    read -r v h < <(mem_of "$1")
    add "rss_$2" "$v"
    add "hwm_$2" "$h"
}

# ---------------------------------------------------------------- wrk
# run_wrk OUTFILE CONNS SECONDS URL EXPECT_STATUS [HEADER]
#  -> WR_RPS (responses with EXPECT_STATUS per second), WR_P50 WR_P99 (ms),
#     WR_TOTAL, WR_OK, WR_ERRS (socket errors), WR_OTHER ("code:count ..."), WR_503
run_wrk() {
    local out=$1 conns=$2 secs=$3 url=$4 expect=$5 header=${6:-} threads=2
    ((conns < 2)) && threads=1
    wrk -t"$threads" -c"$conns" -d"${secs}s" --latency --timeout 10s ${header:+-H "$header"} \
        -s "$BENCH_DIR/post.lua" "$url" >"$out" 2>&1 || true
    read -r WR_RPS WR_P50 WR_P99 WR_TOTAL WR_OK WR_ERRS WR_503 WR_OTHER < <(awk -v expect="$expect" '
        function ms(v) {
            if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000
            if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
            if (v ~ /m$/)  return substr(v, 1, length(v) - 1) * 60000
            if (v ~ /h$/)  return substr(v, 1, length(v) - 1) * 3600000
            if (v ~ /s$/)  return substr(v, 1, length(v) - 1) * 1000
            return v + 0
        }
        $1 == "50%" { p50 = ms($2) }
        $1 == "99%" { p99 = ms($2) }
        $1 == "WRKSUM" { dur = $2 / 1e6; total = $3; errs = $4 + $5 + $6 + $7 }
        $1 == "STATUS" { if ($2 == expect) ok += $3; else other = other (other == "" ? "" : ",") $2 ":" $3; if ($2 == 503) n503 = $3 }
        END {
            if (dur <= 0) { print "nan nan nan 0 0 0 0 wrk-failed"; exit }
            if (other == "") other = "-"
            printf "%.1f %.3f %.3f %d %d %d %d %s\n", ok / dur, p50, p99, total, ok, errs, n503 + 0, other
        }' "$out")
    [[ $WR_OTHER == wrk-failed ]] && { log "wrk failed: $(tail -3 "$out")"; CASE_ERRORS+=("wrk failed on $url"); }
    return 0
}

url_port() { local p=${1#http://*:}; echo "${p%%/*}"; } # URL -> its port

# trigd_idle PORT: whether the trigd on PORT has no run executing or
# waiting: its gauges trigd_runs_in_flight and trigd_runs_queued (this
# instance's slots and queue) and, for the cluster queue of the PostgreSQL
# backend (rows, not in the gauge), no run listed `queued` or `running`
# (GET /api/runs, docs/runs.md). Counting trigd's children with pgrep is
# no such test: a run of append.sh lives about 1 ms, so a sample sees none
# for a while even with thousands of runs still queued (2026-11-27: 0
# children in 5 polls in a row while the gauges said 8 in flight and
# 2,000+ queued).
trigd_idle() {
    local m st body
    m=$(curl -s --max-time 5 "http://127.0.0.1:$1/metrics") || return 1
    awk '$1 == "trigd_runs_in_flight" || $1 == "trigd_runs_queued" { n++; if ($2 != 0) busy = 1 }
        END { exit !(n == 2 && !busy) }' <<<"$m" || return 1
    for st in queued running; do
        body=$(curl -s --max-time 5 -H "Authorization: Bearer $KEY" \
            "http://127.0.0.1:$1/api/runs?state=$st&limit=1") || return 1
        [[ $body == '{"Runs":[],'* ]] || return 1
    done
}

# trigd_drain PORT BOUND_S -> DRAIN_S (seconds waited); status 0 once the
# trigd on PORT is idle (trigd_idle), 1 when BOUND_S passed first.
trigd_drain() {
    local t0 deadline
    now_us; t0=$NOW_US; deadline=$((t0 + $2 * 1000000))
    while :; do
        if trigd_idle "$1"; then now_us; DRAIN_S=$(calc "($NOW_US - $t0) / 1e6"); return 0; fi
        now_us
        ((NOW_US < deadline)) || { DRAIN_S=$(calc "($NOW_US - $t0) / 1e6"); return 1; }
        snooze 0.1
    done
}

# ---------------------------------------------------------------- start
install_missing
command -v cargo >/dev/null || ((SKIP_TRIGD)) || [[ -n ${BENCH_TRIGD:-} ]] || die "cargo not found (needed to build trigd)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trigd-bench.XXXXXX")
mkfifo "$WORK/.snooze"
exec 9<>"$WORK/.snooze"

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
if awk -v l="${LOAD_START%% *}" 'BEGIN { exit !(l > 0.7) }'; then
    log "warning: load average is $LOAD_START: other work is running, figures will be noisy"
fi

if ((SKIP_TRIGD)); then
    log "BENCH_SKIP_TRIGD=1: trigd side skipped"
elif [[ -n ${BENCH_TRIGD:-} ]]; then
    [[ -x $TRIGD ]] || die "BENCH_TRIGD=$TRIGD is not executable"
    log "using $TRIGD (no build)"
else
    log "building trigd (cargo static)"
    (cd "$ROOT" && cargo static) >"$WORK/build.log" 2>&1 ||
        { tail -30 "$WORK/build.log" >&2; die "cargo static failed (log above)"; }
    [[ -x $TRIGD ]] || die "no $TRIGD after the build"
fi

log "building spawn_floor"
cc -O2 -o "$WORK/spawn_floor" "$BENCH_DIR/spawn_floor.c" || die "cc spawn_floor.c failed"

SHA=$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)

# ---- trigd definitions
TD=$WORK/trigd
BASE_CONFIG=$(trigd_base_config "$SHA" "$MAX_RUNS")
# The signed-webhook cases: a GitHub push (tests/data/github-push.json),
# HMAC-SHA256 in X-Hub-Signature-256, one rule (X-GitHub-Event = push), /bin/true.
PUSH=$ROOT/tests/data/github-push.json
GH_SECRET="bench-github-secret-3e9d"
# The secret file in a directory of its own: trigd watches the directory
# of every secret file it reads (a rotation is a rename into place), so a
# secret beside the files the async runs append to would wake trigd's
# watcher at every append (3 % of the CPU samples of an async round,
# perf record, 2026-11-27), a cost the peer, which watches no such file,
# does not pay. /etc/trigd/ or systemd's credentials directory are as quiet.
mkdir -p "$WORK/secrets"
printf '%s\n' "$GH_SECRET" >"$WORK/secrets/github-secret"
GH_SIG=$(openssl dgst -sha256 -hmac "$GH_SECRET" <"$PUSH" | sed 's/^.* //')
GH_BAD=$(printf '0%.0s' {1..64})
GH_HEADERS=$'Content-Type: application/json\nX-GitHub-Event: push\nX-Hub-Signature-256: sha256='
write_trigd_config "$TD" "$SHA" "$MAX_RUNS" "$WORK/secrets/github-secret" \
    "$WORK/async-trigd.out" "$WORK/idem-trigd.out"

# ---- webhook definitions (same programs)
WD=$WORK/webhook
mkdir -p "$WD"
printf '#!/bin/sh\necho run >> %s\n' "$WORK/async-webhook.out" >"$WD/append.sh"
chmod +x "$WD/append.sh"
WEBHOOK_HOOKS='[
  {"id": "true", "execute-command": "/bin/true", "include-command-output-in-response": true},
  {"id": "echo", "execute-command": "/bin/echo", "include-command-output-in-response": true,
   "pass-arguments-to-command": [{"source": "url", "name": "a"}, {"source": "url", "name": "b"}]},
  {"id": "async", "execute-command": "'"$WD"'/append.sh"},
  {"id": "reject", "execute-command": "/bin/true", "include-command-output-in-response": true,
   "trigger-rule": {"match": {"type": "value", "value": "'"$KEY"'",
                              "parameter": {"source": "url", "name": "token"}}},
   "trigger-rule-mismatch-http-response-code": 401},
  {"id": "github", "execute-command": "/bin/true", "include-command-output-in-response": true,
   "trigger-rule": {"and": [
     {"match": {"type": "payload-hmac-sha256", "secret": "'"$GH_SECRET"'",
                "parameter": {"source": "header", "name": "X-Hub-Signature-256"}}},
     {"match": {"type": "value", "value": "push",
                "parameter": {"source": "header", "name": "X-GitHub-Event"}}}]}}'
printf '%s\n]\n' "$WEBHOOK_HOOKS" >"$WD/hooks.json"

# ---------------------------------------------------------------- spawn floor
want floor && log "spawn floor: posix_spawn+waitpid of /bin/true, ${SECS}s x $ROUNDS, 1 and 2 processes"
want floor && for ((r = 0; r < ROUNDS; r++)); do
    for p in 1 2; do
        line=$("$WORK/spawn_floor" "$SECS" "$p")
        v=${line##*per_sec=}; v=${v%% *}
        add "floor.$p" "$v"
    done
done

# ---------------------------------------------------------------- main servers
T_BASE="" W_BASE=""
if ! ((SKIP_TRIGD)); then
    start_trigd "$TD"
    T_MAIN=$T_PID
    T_BASE=http://127.0.0.1:$T_PORT
    SLOTS=$(trigd_metric "$T_PORT" trigd_run_slots)
    ASYNC_SLOTS=$(trigd_metric "$T_PORT" trigd_async_run_slots)
    log "trigd pid $T_MAIN on $T_BASE; $SLOTS run slots, $ASYNC_SLOTS of them for async runs"
fi
start_webhook "$WD" -hotreload
W_MAIN=$W_PID
W_BASE=http://127.0.0.1:$W_PORT
log "webhook pid $W_MAIN on $W_BASE"
# Idle after start-up has settled and one more request was answered:
# trigd gives its start-up's code pages back once start-up has settled
# (200 ms without reload events), and a request maps those of its own path
# back, so this is the figure of a server that has served (a figure taken
# right after start-up would hold less). webhook answers `/` with "OK".
snooze 1
((SKIP_TRIGD)) || http_status GET "$T_PORT" /healthz
http_status GET "$W_PORT" /
snooze 0.5
if ! ((SKIP_TRIGD)); then read -r v h < <(mem_of "$T_MAIN"); add rss_idle.trigd "$v"; add hwm_idle.trigd "$h"; fi
read -r v h < <(mem_of "$W_MAIN"); add rss_idle.webhook "$v"; add hwm_idle.webhook "$h"

# case table: NAME CONNS EXPECT trigd-path webhook-path
T_TRUE="/api?api_key=$KEY&program_id=1"
T_ECHO="/api?api_key=$KEY&program_id=2&variables=hello&variables=world"
T_ASYNC="/api?api_key=$KEY&program_id=3&run_async=true"
T_REJECT="/api?api_key=wrong-$KEY&program_id=1"
W_TRUE="/hooks/true"
W_ECHO="/hooks/echo?a=hello&b=world"
W_ASYNC="/hooks/async"
W_REJECT="/hooks/reject?token=wrong-$KEY"
T_GITHUB="/tools/bench/prod/github"
W_GITHUB="/hooks/github"

# sanity: every endpoint answers as expected before anything is measured
check() { # SIDE URL EXPECT_STATUS [EXPECT_BODY_SUBSTRING]
    local code body
    body=$(curl -s -X POST -w '\n%{http_code}' "$2" 2>/dev/null) || true
    code=${body##*$'\n'}
    body=${body%$'\n'*}
    [[ $code == "$3" ]] || die "$1: POST $2 gave $code, expected $3: $body"
    [[ -z ${4:-} || $body == *"$4"* ]] || die "$1: POST $2 body lacks '$4': $body"
}
if ! ((SKIP_TRIGD)); then
    check trigd "$T_BASE$T_TRUE" 200 '"Success"'
    check trigd "$T_BASE$T_ECHO" 200 'hello world'
    check trigd "$T_BASE$T_REJECT" 401 invalid_api_key
    check trigd "$T_BASE$T_ASYNC" 200 'Program started'
fi
check webhook "$W_BASE$W_TRUE" 200
check webhook "$W_BASE$W_ECHO" 200 'hello world'
check webhook "$W_BASE$W_REJECT" 401
check webhook "$W_BASE$W_ASYNC" 200
check_signed() { # SIDE URL SIGNATURE EXPECT_STATUS
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$2" -H 'Content-Type: application/json' \
        -H 'X-GitHub-Event: push' -H "X-Hub-Signature-256: sha256=$3" --data-binary "@$PUSH") || true
    [[ $code == "$4" ]] || die "$1: signed POST $2 gave $code, expected $4"
}
if ! ((SKIP_TRIGD)); then
    check_signed trigd "$T_BASE$T_GITHUB" "$GH_SIG" 200
    check_signed trigd "$T_BASE$T_GITHUB" "$GH_BAD" 403
fi
check_signed webhook "$W_BASE$W_GITHUB" "$GH_SIG" 200
check_signed webhook "$W_BASE$W_GITHUB" "$GH_BAD" 500
snooze 0.5

SIDES=(webhook)
((SKIP_TRIGD)) || SIDES=(trigd webhook)
base_of() { if [[ $1 == trigd ]]; then echo "$T_BASE"; else echo "$W_BASE"; fi; }

mkdir -p "$WORK/wrk"
if ((WARMUP > 0)); then
    log "warm-up ${WARMUP}s each"
    for side in "${SIDES[@]}"; do
        if [[ $side == trigd ]]; then u=$T_BASE$T_TRUE; else u=$W_BASE$W_TRUE; fi
        run_wrk "$WORK/wrk/warmup-$side.txt" 8 "$WARMUP" "$u" 200
    done
fi

# ---------------------------------------------------------------- wrk cases
# NAME CONNS EXPECT TRIGD_PATH WEBHOOK_PATH
CASES=(
    "true1 1 200 $T_TRUE $W_TRUE"
    "true8 8 200 $T_TRUE $W_TRUE"
    "true32 32 200 $T_TRUE $W_TRUE"
    "echo8 8 200 $T_ECHO $W_ECHO"
    "echo32 32 200 $T_ECHO $W_ECHO"
    "reject8 8 401 $T_REJECT $W_REJECT"
    "signed8 8 200 $T_GITHUB $W_GITHUB"
    "badsig8 8 403/500 $T_GITHUB $W_GITHUB"
)
# case_request NAME: the body file and headers of a case (none for most)
case_request() {
    WRK_BODY_FILE="" WRK_HEADERS=""
    case $1 in
    signed8) WRK_BODY_FILE=$PUSH WRK_HEADERS=$GH_HEADERS$GH_SIG ;;
    badsig8) WRK_BODY_FILE=$PUSH WRK_HEADERS=$GH_HEADERS$GH_BAD ;;
    esac
    export WRK_BODY_FILE WRK_HEADERS
}
for c in "${CASES[@]}"; do
    read -r name conns expect tpath wpath <<<"$c"
    want "$name" || continue
    case_request "$name"
    log "case $name: $conns connections, ${SECS}s, $ROUNDS rounds A/B"
    for ((r = 1; r <= ROUNDS; r++)); do
        for side in "${SIDES[@]}"; do
            # EXPECT is one status, or TRIGD/WEBHOOK when they differ
            if [[ $side == trigd ]]; then
                u=$T_BASE$tpath e=${expect%/*} pid=$T_MAIN
            else
                u=$W_BASE$wpath e=${expect#*/} pid=$W_MAIN
            fi
            cpu_mark "$pid"
            run_wrk "$WORK/wrk/$name-$side-$r.txt" "$conns" "$SECS" "$u" "$e"
            cpu_since "$name.$side" "$WR_TOTAL"
            add "$name.$side.rps" "$WR_RPS"
            add "$name.$side.p50" "$WR_P50"
            add "$name.$side.p99" "$WR_P99"
            add "$name.$side.refused" "$WR_503"
            add "$name.$side.notok" "$(awk -v t="$WR_TOTAL" -v o="$WR_OK" -v e="$WR_ERRS" \
                'BEGIN { if (t + e > 0) printf "%.6f", (t - o + e) / (t + e); else print "nan" }')"
            [[ $WR_OTHER == - && $WR_ERRS == 0 ]] || add "$name.$side.note" "r$r:other=$WR_OTHER,sockerr=$WR_ERRS"
            log "  $side r$r: $WR_RPS/s p50 ${WR_P50}ms p99 ${WR_P99}ms (total $WR_TOTAL, refused(503) $WR_503, other $WR_OTHER, socket errors $WR_ERRS), CPU/call server $CPU_CALL µs, children $CPU_CALL_CHILD µs"
        done
    done
done
case_request none

# ---------------------------------------------------------------- idempotent repeat
# trigd only (webhook has no idempotency keys): one Idempotency-Key sent by
# 8 connections for SECS: the first request runs the program, every other
# one is answered from the original run. Runs executed = lines appended.
T_ONCE="/api?api_key=$KEY&program_id=5"
if ! ((SKIP_TRIGD)) && want idem8; then
    log "case idem8: one Idempotency-Key, 8 connections, ${SECS}s, $ROUNDS rounds"
    for ((r = 1; r <= ROUNDS; r++)); do
        : >"$WORK/idem-trigd.out"
        run_wrk "$WORK/wrk/idem8-trigd-$r.txt" 8 "$SECS" "$T_BASE$T_ONCE" 200 "Idempotency-Key: bench-repeat-$r"
        add idem8.trigd.rps "$WR_RPS"
        add idem8.trigd.p50 "$WR_P50"
        add idem8.trigd.p99 "$WR_P99"
        add idem8.trigd.runs "$(wc -l <"$WORK/idem-trigd.out")"
        [[ $WR_OTHER == - && $WR_ERRS == 0 ]] || add "idem8.trigd.note" "r$r:other=$WR_OTHER,sockerr=$WR_ERRS"
        log "  trigd r$r: $WR_RPS/s p50 ${WR_P50}ms p99 ${WR_P99}ms, runs executed $(wc -l <"$WORK/idem-trigd.out") (total $WR_TOTAL)"
    done
fi

# ---------------------------------------------------------------- TLS
# Both servers again, over HTTPS with the same ECDSA P-256 certificate
# (certbot's default key type): trigd with tls_cert/tls_key, webhook with
# -secure -cert -key. Keep-alive cases as above (sync /bin/true and
# rejected, 8 connections), and new TLS connections per second: the
# rejected request with `Connection: close`, so that wrk opens a new
# connection (a full handshake) for every request. BENCH_TLS=0 skips.
if [[ ${BENCH_TLS:-1} != 0 ]] && want tls; then
    TLSD=$WORK/tls
    mkdir -p "$TLSD"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$TLSD/key.pem" \
        -out "$TLSD/cert.pem" -days 30 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
        2>/dev/null || die "openssl could not make the TLS certificate"
    if ! ((SKIP_TRIGD)); then
        TTD=$WORK/trigd-tls
        cp -r "$TD" "$TTD"
        rm -rf "$TTD/state"
        sed -i "s|^\[server\]\$|[server]\ntls_cert = \"$TLSD/cert.pem\"\ntls_key = \"$TLSD/key.pem\"|" "$TTD/config.toml"
        : >"$TTD.trigd.out" # before the server opens it: the loop below reads it at once
        "$TRIGD" serve --config "$TTD/config.toml" --listen 127.0.0.1:0 >"$TTD.trigd.out" 2>"$TTD.trigd.err" &
        TT_PID=$!
        PIDS+=("$TT_PID")
        for ((i = 0; i < 600; i++)); do
            TT_PORT=$(sed -n 's|^listening on https://127.0.0.1:||p' "$TTD.trigd.out")
            [[ -n $TT_PORT ]] && break
            snooze 0.05
        done
        [[ -n $TT_PORT ]] || die "trigd over TLS did not start: $(tail -5 "$TTD.trigd.err")"
        TT_BASE=https://127.0.0.1:$TT_PORT
    fi
    WTD=$WORK/webhook-tls
    cp -r "$WD" "$WTD"
    for ((try = 0; try < 10; try++)); do
        WT_PORT=$((20000 + RANDOM % 40000))
        port_open "$WT_PORT" || break
    done
    (cd "$WTD" && exec webhook -hooks "$WTD/hooks.json" -ip 127.0.0.1 -port "$WT_PORT" \
        -secure -cert "$TLSD/cert.pem" -key "$TLSD/key.pem") >"$WTD/webhook.out" 2>"$WTD/webhook.err" &
    WT_PID=$!
    PIDS+=("$WT_PID")
    WT_BASE=https://127.0.0.1:$WT_PORT
    for ((i = 0; i < 600; i++)); do
        [[ $(curl -sk -o /dev/null -w '%{http_code}' "$WT_BASE/") == 200 ]] && break
        snooze 0.05
    done
    tls_check() { # SIDE URL EXPECT_STATUS
        local code
        code=$(curl -sk -o /dev/null -w '%{http_code}' -X POST "$2") || true
        [[ $code == "$3" ]] || die "$1 over TLS: POST $2 gave $code, expected $3"
    }
    if ! ((SKIP_TRIGD)); then
        tls_check trigd "$TT_BASE$T_TRUE" 200
        tls_check trigd "$TT_BASE$T_REJECT" 401
    fi
    tls_check webhook "$WT_BASE$W_TRUE" 200
    tls_check webhook "$WT_BASE$W_REJECT" 401
    # NAME CONNS EXPECT TRIGD_PATH WEBHOOK_PATH [HEADER]
    TLS_CASES=(
        "tls_true8 8 200 $T_TRUE $W_TRUE"
        "tls_reject8 8 401 $T_REJECT $W_REJECT"
        "tls_new8 8 401 $T_REJECT $W_REJECT Connection: close"
    )
    for c in "${TLS_CASES[@]}"; do
        read -r name conns expect tpath wpath header <<<"$c"
        log "case $name: $conns connections over TLS, ${SECS}s, $ROUNDS rounds A/B"
        for ((r = 1; r <= ROUNDS; r++)); do
            for side in "${SIDES[@]}"; do
                if [[ $side == trigd ]]; then u=$TT_BASE$tpath pid=$TT_PID; else u=$WT_BASE$wpath pid=$WT_PID; fi
                cpu_mark "$pid"
                run_wrk "$WORK/wrk/$name-$side-$r.txt" "$conns" "$SECS" "$u" "$expect" "$header"
                cpu_since "$name.$side" "$WR_TOTAL"
                add "$name.$side.rps" "$WR_RPS"
                add "$name.$side.p50" "$WR_P50"
                add "$name.$side.p99" "$WR_P99"
                [[ $WR_OTHER == - && $WR_ERRS == 0 ]] || add "$name.$side.note" "r$r:other=$WR_OTHER,sockerr=$WR_ERRS"
                log "  $side r$r: $WR_RPS/s p50 ${WR_P50}ms p99 ${WR_P99}ms (total $WR_TOTAL, other $WR_OTHER, socket errors $WR_ERRS), CPU/call server $CPU_CALL µs, children $CPU_CALL_CHILD µs"
            done
        done
    done
    if ! ((SKIP_TRIGD)); then stop_pid "$TT_PID"; forget_pid "$TT_PID"; fi
    stop_pid "$WT_PID"; forget_pid "$WT_PID"
fi

snooze 0.5
if ! ((SKIP_TRIGD)); then read -r v h < <(mem_of "$T_MAIN"); add rss_sync.trigd "$v"; fi
read -r v h < <(mem_of "$W_MAIN"); add rss_sync.webhook "$v"

# ---------------------------------------------------------------- async accept
# sampler PID FILE OUT: every ~50 ms "time_us children lines"
sampler() {
    local pid=$1 file=$2 out=$3 n l
    trap 'exit 0' TERM
    while :; do
        n=$(pgrep -c -P "$pid" 2>/dev/null) || n=0
        l=$(wc -l <"$file" 2>/dev/null) || l=0
        printf '%s %s %s\n' "${EPOCHREALTIME//[.,]/}" "$n" "$l" >>"$out"
        snooze 0.05
    done
}
async_round() { # SIDE PID URL OUTFILE ROUND
    local side=$1 pid=$2 url=$3 file=$4 r=$5 spid t0 t_end deadline n l prev_l="" stable_since samples
    local self0 child0 cpu_accept
    samples=$WORK/async-$side-$r.samples
    : >"$file"
    : >"$samples"
    sampler "$pid" "$file" "$samples" &
    spid=$!
    PIDS+=("$spid")
    cpu_of "$pid"; self0=$CPU_SELF child0=$CPU_CHILD
    now_us; t0=$NOW_US
    run_wrk "$WORK/wrk/async-$side-$r.txt" 32 "$ASYNC_SECS" "$url" 200
    # The server's CPU while it accepts, per accepted call; it includes
    # starting and reaping the runs that executed meanwhile (webhook
    # starts each at once, trigd as slots free up), hence the row per
    # executed run below, which covers the drain too.
    cpu_of "$pid"
    cpu_accept=$(per_call "$self0" "$CPU_SELF" "$WR_OK")
    add "async.$side.cpu" "$cpu_accept"
    now_us; t_end=$NOW_US; deadline=$((t_end + 240000000)); stable_since=$t_end
    # trigd: until no run is queued or running (its gauges and run list),
    # so that no backlog is left for the cases after this one.
    if [[ $side == trigd ]] && ! trigd_drain "$(url_port "$url")" 240; then
        log "  $side: runs still queued or running 240 s after the load"
        add "async.$side.note" "r$r:not-drained-after-240s"
    fi
    # settle: no child left and the line count unchanged for 1 s (at most 240 s)
    while :; do
        n=$(pgrep -c -P "$pid" 2>/dev/null) || n=0
        l=$(wc -l <"$file")
        now_us
        if [[ $l != "$prev_l" || $n != 0 ]]; then prev_l=$l; stable_since=$NOW_US; fi
        ((NOW_US - stable_since >= 1000000)) && break
        ((NOW_US < deadline)) || { log "  $side: runs still going 240 s after the load"; add "async.$side.note" "r$r:not-settled-after-240s"; break; }
        snooze 0.05
    done
    stop_pid "$spid"
    forget_pid "$spid"
    # From the load's start until the drain ended (every child reaped): the
    # children's CPU and the server's own, per executed run.
    cpu_of "$pid"
    add "async.$side.ccpu" "$(per_call "$child0" "$CPU_CHILD" "$l")"
    add "async.$side.cpurun" "$(per_call "$self0" "$CPU_SELF" "$l")"
    # peak children; time the final line count was first seen
    read -r peak t_last < <(awk -v final="$l" -v t0="$t0" '
        { if ($2 > peak) peak = $2; if ($3 >= final && !seen) { seen = 1; t = $1 } }
        END { if (!seen) t = t0; print peak + 0, t }' "$samples")
    local secs_exec
    secs_exec=$(calc "($t_last - $t0) / 1e6")
    add "async.$side.accepted" "$WR_OK"
    add "async.$side.refused" "$WR_503"
    add "async.$side.p50" "$WR_P50"
    add "async.$side.p99" "$WR_P99"
    add "async.$side.executed" "$l"
    add "async.$side.accept_rate" "$(calc "$WR_OK / $ASYNC_SECS")"
    add "async.$side.exec_rate" "$(awk -v l="$l" -v s="$secs_exec" 'BEGIN { printf "%.1f", (s > 0 ? l / s : 0) }')"
    add "async.$side.peak" "$peak"
    add "async.$side.lost" "$((WR_OK > l ? WR_OK - l : 0))" # in flight when wrk stopped: run, not counted
    add "async.$side.drain" "$secs_exec"
    [[ $WR_OTHER == - && $WR_ERRS == 0 ]] || add "async.$side.note" "r$r:other=$WR_OTHER,sockerr=$WR_ERRS"
    log "  $side r$r: accepted $WR_OK, refused(503) $WR_503, executed $l in ${secs_exec}s, peak children $peak (other $WR_OTHER, socket errors $WR_ERRS), CPU server $cpu_accept µs/accept, $(per_call "$self0" "$CPU_SELF" "$l") µs/run, children $(per_call "$child0" "$CPU_CHILD" "$l") µs/run"
}
want async && log "case async: 32 connections, ${ASYNC_SECS}s, $ASYNC_ROUNDS rounds A/B"
want async && for ((r = 1; r <= ASYNC_ROUNDS; r++)); do
    for side in "${SIDES[@]}"; do
        if [[ $side == trigd ]]; then
            async_round trigd "$T_MAIN" "$T_BASE$T_ASYNC" "$WORK/async-trigd.out" "$r"
        else
            async_round webhook "$W_MAIN" "$W_BASE$W_ASYNC" "$WORK/async-webhook.out" "$r"
        fi
    done
done

snooze 0.5
if ! ((SKIP_TRIGD)); then read -r v h < <(mem_of "$T_MAIN"); add rss_load.trigd "$v"; add hwm_load.trigd "$h"; fi
read -r v h < <(mem_of "$W_MAIN"); add rss_load.webhook "$v"; add hwm_load.webhook "$h"

# ---------------------------------------------------------------- reload
# trigd: a new program file written in place; webhook (-hotreload): the hooks
# file rewritten in place with one more hook. Both with bash's own
# redirection, so that the time measured is the server's: a rename with
# `mv` (the safe way to add a program, which trigd reloads at once too)
# forks and execs a process, 1-2 ms that fell on trigd's side alone
# before 2026-11-27.
reload_wait() { # PORT PATH -> RELOAD_MS (or "nan" after 10 s)
    local port=$1 path=$2 t0=$3 deadline=$(($3 + 10000000))
    while :; do
        http_status POST "$port" "$path"
        now_us
        if [[ $HTTP_STATUS == 200 ]]; then RELOAD_MS=$(calc "($NOW_US - $t0) / 1000"); return; fi
        ((NOW_US < deadline)) || { RELOAD_MS=nan; return; }
        # Half a millisecond between polls: both servers reload in about
        # one, so a coarser step would round both to the same figure.
        snooze 0.0005
    done
}
# Three times $RELOAD_TRIALS trials, which side goes first alternating: a
# trial is a few ms, and the median of 11 moved by a millisecond between
# runs of the same build (3.6 / 3.5 ms against 2.6 / 3.5 the run before).
want reload && log "case reload: $((3 * RELOAD_TRIALS)) trials each, alternating"
want reload && for ((k = 1; k <= 3 * RELOAD_TRIALS; k++)); do
    order=("${SIDES[@]}")
    ((k % 2 == 0 && ${#SIDES[@]} == 2)) && order=(webhook trigd)
    for side in "${order[@]}"; do
        if [[ $side == trigd ]]; then
            id=$((100 + k))
            content=$(printf 'id = %d\nname = "new%d"\n\n[[functions]]\nname = "run"\ncommand = ["/bin/true"]\n[functions.webhook]\n' "$id" "$k")
            now_us; t0=$NOW_US
            printf '%s\n' "$content" >"$TD/programs/new$k.toml"
            reload_wait "$T_PORT" "/api?api_key=$KEY&program_id=$id" "$t0"
        else
            WEBHOOK_HOOKS+=',
  {"id": "new'"$k"'", "execute-command": "/bin/true", "include-command-output-in-response": true}'
            content=$(printf '%s\n]\n' "$WEBHOOK_HOOKS")
            now_us; t0=$NOW_US
            printf '%s\n' "$content" >"$WD/hooks.json"
            reload_wait "$W_PORT" "/hooks/new$k" "$t0"
        fi
        add "reload.$side" "$RELOAD_MS"
        log "  $side trial $k: ${RELOAD_MS} ms"
        snooze 0.3
    done
done

# main servers are done
for pid in ${T_MAIN:-} "$W_MAIN"; do stop_pid "$pid"; forget_pid "$pid"; done

# ---------------------------------------------------------------- big output, followers (trigd only)
# A trigd of its own (its VmHWM is this case's peak), keeping up to 128 MiB
# of each stream: program 6 prints OUT_MB MB on stdout (`yes | head -c`),
# program 7 prints a tenth of it. webhook keeps no output and has no
# followers: the peer is the same pipeline redirected to a file on the same
# disk (the state dir's).
OUT_MB=${BENCH_OUTPUT_MB:-$d_output}
OUT_BYTES=$((OUT_MB * 1048576))
OD=$WORK/output-trigd
mkdir -p "$OD/programs"
trigd_base_config "$SHA" "$MAX_RUNS" | sed "/^\[server\]/a max_output_bytes = $((128 * 1048576))" >"$OD/config.toml"
bench_program "$OD" 6 big "[\"/bin/sh\", \"-c\", \"yes | head -c $OUT_BYTES\"]" 'output = "text"' '[functions.webhook]'
bench_program "$OD" 7 tenth "[\"/bin/sh\", \"-c\", \"yes | head -c $((OUT_BYTES / 10))\"]" 'output = "text"' '[functions.webhook]'
# start_async_run PROGRAM -> RUN (id), T_ACCEPT (us)
start_async_run() {
    local body
    now_us; T_ACCEPT=$NOW_US
    body=$(curl -s -X POST "$O_BASE/api?api_key=$KEY&program_id=$1&run_async=true")
    RUN=$(sed -n 's/.*"Run": *"\([^"]*\)".*/\1/p' <<<"$body")
    [[ -n $RUN ]] || die "trigd: async run of program $1 not accepted: $body"
}
# wait_run_end RUN -> RUN_STATE, RUN_SECS (from the record: CreatedAt to
# FinishedAt). Polled every ~5 ms, at most 300 s. The answer goes to a file
# and grep reads the fields from it: the record of a finished run holds its
# Result (100 MB of output is a record of ~150 MB, which bash would take
# seconds to hold), and its keys are in alphabetical order (State after
# Result).
wait_run_end() {
    local deadline rec=$WORK/record.json created finished
    now_us; deadline=$((NOW_US + 300000000))
    while :; do
        curl -s -o "$rec" "$O_BASE/api/runs/$1?api_key=$KEY" || : >"$rec"
        RUN_STATE=$(grep -o '"State": *"[a-z_]*"' "$rec" | sed 's/.*"\([a-z_]*\)"$/\1/') || true
        if [[ -n $RUN_STATE && $RUN_STATE != queued && $RUN_STATE != running ]]; then
            created=$(grep -o '"CreatedAt": *"[^"]*"' "$rec" | sed 's/.*"\([^"]*\)"$/\1/') || true
            finished=$(grep -o '"FinishedAt": *"[^"]*"' "$rec" | sed 's/.*"\([^"]*\)"$/\1/') || true
            RUN_SECS=$(calc "$(date -d "$finished" +%s.%N) - $(date -d "$created" +%s.%N)")
            rm -f "$rec"
            return 0
        fi
        now_us
        ((NOW_US < deadline)) || die "run $1 still ${RUN_STATE:-unknown} after 300 s"
        snooze 0.005
    done
}
if ! ((SKIP_TRIGD)) && { want output || want follow1 || want follow100; }; then
    start_trigd "$OD"
    O_PID=$T_PID O_BASE=http://127.0.0.1:$T_PORT
    read -r v h < <(mem_of "$O_PID"); add rss_out0.trigd "$v"
fi
if ! ((SKIP_TRIGD)) && want output; then
    log "case output: one run printing $OUT_MB MB on stdout, kept; $ROUNDS rounds vs sh -c '… > file'"
    for ((r = 1; r <= ROUNDS; r++)); do
        start_async_run 6
        wait_run_end "$RUN"
        [[ $RUN_STATE == finished ]] || die "the $OUT_MB MB run ended $RUN_STATE"
        add out.trigd "$RUN_SECS"
        kept=$(stat -c %s "$OD/state/output/${RUN##*-}" 2>/dev/null || echo 0)
        add out.kept "$kept"
        now_us; t0=$NOW_US
        sh -c "yes | head -c $OUT_BYTES > '$OD/state/plain.out'"
        now_us
        add out.sh "$(calc "($NOW_US - $t0) / 1e6")"
        rm -f "$OD/state/plain.out"
        read -r v h < <(mem_of "$O_PID"); add rss_out.trigd "$v"; add hwm_out.trigd "$h"
        log "  r$r: trigd $(calc "$RUN_SECS * 1000") ms (kept $kept bytes), sh > file $(calc "($NOW_US - $t0) / 1e3") ms, trigd VmRSS $v KiB VmHWM $h KiB"
    done
fi
# follow RUN OUTFILE: one follower with curl: "bytes seconds ended" into
# OUTFILE (ended: 1 when the stream closed with the run's `end` event).
# grep, not awk, reads the stream: its lines are up to hundreds of MB
# (the `end` event carries the run record, Result included), which awk
# reads slowly enough to throttle the follower.
follow() {
    local ended
    ended=$(curl -s -N -w '%{stderr}%{size_download} %{time_total}' \
        "$O_BASE/api/runs/$1/output?api_key=$KEY&follow=1" 2>"$2.w" | grep -c '^event: end$') || true
    echo "$(cat "$2.w" 2>/dev/null || echo 0 0) ${ended:-0}" >"$2"
}
if ! ((SKIP_TRIGD)) && want follow1; then
    log "case follow1: one follower of a run printing $OUT_MB MB, $ROUNDS rounds"
    for ((r = 1; r <= ROUNDS; r++)); do
        start_async_run 6
        follow "$RUN" "$WORK/follow1-$r.txt"
        read -r bytes secs ended <"$WORK/follow1-$r.txt"
        ((ended)) || log "  warning: the follower's stream did not end with the run's end event"
        wait_run_end "$RUN"
        add follow1.rate "$(calc "$bytes / ($secs > 0 ? $secs : 1)")"
        add follow1.bytes "$bytes"
        read -r v h < <(mem_of "$O_PID"); add hwm_follow1.trigd "$h"
        log "  r$r: $bytes bytes of events in $secs s, run $RUN_STATE, trigd VmHWM $h KiB"
    done
fi
if ! ((SKIP_TRIGD)) && want follow100; then
    log "case follow100: 100 followers of one run printing $((OUT_MB / 10)) MB, $ROUNDS rounds"
    for ((r = 1; r <= ROUNDS; r++)); do
        start_async_run 7
        fpids=()
        for ((f = 0; f < 100; f++)); do
            follow "$RUN" "$WORK/follow100-$r-$f.txt" &
            fpids+=("$!")
            PIDS+=("$!")
        done
        for p in "${fpids[@]}"; do wait "$p" 2>/dev/null || true; forget_pid "$p"; done
        now_us; t_last=$NOW_US
        wait_run_end "$RUN"
        done_ok=$(awk '$3 == 1 { n++ } END { print n + 0 }' "$WORK"/follow100-"$r"-*.txt)
        total=$(awk '{ b += $1 } END { print b + 0 }' "$WORK"/follow100-"$r"-*.txt)
        add follow100.secs "$(calc "($t_last - $T_ACCEPT) / 1e6")"
        add follow100.rate "$(calc "$total / (($t_last - $T_ACCEPT) / 1e6)")"
        add follow100.complete "$done_ok"
        read -r v h < <(mem_of "$O_PID"); add hwm_follow100.trigd "$h"
        log "  r$r: $done_ok of 100 followers got the whole output, $total bytes in $(calc "($t_last - $T_ACCEPT) / 1e6") s, trigd VmHWM $h KiB"
    done
fi
[[ -n ${O_PID:-} ]] && { stop_pid "$O_PID"; forget_pid "$O_PID"; }

# ---------------------------------------------------------------- start-up with many definitions
log "case start-up: $NPROGRAMS program files / hooks, $START_TRIALS trials each"
BT=$WORK/big-trigd
BW=$WORK/big-webhook
mkdir -p "$BT/programs" "$BW"
printf '%s\n' "$BASE_CONFIG" >"$BT/config.toml" # the same settings; programs/ beside it
awk -v n="$NPROGRAMS" -v dir="$BT/programs" -v hooks="$BW/hooks.json" 'BEGIN {
    printf "[\n" > hooks
    for (i = 1; i <= n; i++) {
        f = sprintf("%s/p%05d.toml", dir, i)
        printf "id = %d\nname = \"p%d\"\n\n[[functions]]\nname = \"run\"\ncommand = [\"/bin/true\"]\n[functions.webhook]\n", i, i > f
        close(f)
        printf "  {\"id\": \"h%d\", \"execute-command\": \"/bin/true\"}%s\n", i, (i < n ? "," : "") > hooks
    }
    printf "]\n" > hooks
}'
# trigd serving the webhook's own hooks file (hooks_files): one file of
# $NPROGRAMS hooks, as webhook reads it, beside the per-file figure.
BH=$WORK/big-trigd-hooks
mkdir -p "$BH/programs"
{ printf '%s\n' "$BASE_CONFIG" | sed '/^\[\[api_keys\]\]/,$d'
  printf 'hooks_files = ["%s"]\n\n' "$BW/hooks.json"
  printf '%s\n' "$BASE_CONFIG" | sed -n '/^\[\[api_keys\]\]/,$p'; } >"$BH/config.toml"
START_SIDES=("${SIDES[@]}")
((SKIP_TRIGD)) || START_SIDES+=(trigd-hooks)
want startup && for ((k = 1; k <= START_TRIALS; k++)); do
    for side in "${START_SIDES[@]}"; do
        case $side in
        trigd)
            rm -rf "$BT/state"
            start_timed trigd "$BT"
            T_PID=$PID T_PORT=$PORT
            hz=$(curl -s "http://127.0.0.1:$T_PORT/healthz")
            [[ $hz =~ \"Programs\":\ *$NPROGRAMS[,}] ]] || log "  warning: trigd /healthz after start-up: $hz"
            read -r v h < <(mem_of "$T_PID"); add rss_big0.trigd "$v"
            settle_mem "$T_PID" big.trigd
            stop_pid "$T_PID"; forget_pid "$T_PID"
            ;;
        trigd-hooks)
            rm -rf "$BH/state"
            start_timed trigd "$BH"
            http_status POST "$PORT" "/hooks/h$NPROGRAMS"
            [[ $HTTP_STATUS == 200 ]] || log "  warning: trigd (hooks file) /hooks/h$NPROGRAMS gave $HTTP_STATUS"
            settle_mem "$PID" big.trigd-hooks
            stop_pid "$PID"; forget_pid "$PID"
            ;;
        webhook)
            start_timed webhook "$BW"
            W_PID=$PID W_PORT=$PORT
            http_status POST "$W_PORT" "/hooks/h$NPROGRAMS"
            [[ $HTTP_STATUS == 200 ]] || log "  warning: webhook /hooks/h$NPROGRAMS gave $HTTP_STATUS"
            read -r v h < <(mem_of "$W_PID"); add rss_big0.webhook "$v"
            settle_mem "$W_PID" big.webhook
            stop_pid "$W_PID"; forget_pid "$W_PID"
            ;;
        esac
        add "start.$side" "$(calc "$STARTUP_US / 1000")"
        log "  $side trial $k: $(calc "$STARTUP_US / 1000") ms"
    done
done

# ---------------------------------------------------------------- reload among many definitions
# One new program / hook added among 10 and among $NPROGRAMS: a reload should
# cost work in proportion to the change, not to the directory (or file).
log "case reload among 10 and $NPROGRAMS definitions: $((3 * RELOAD_TRIALS)) and $RELOAD_TRIALS trials each, alternating"
BS=$WORK/few-trigd
BSW=$WORK/few-webhook
mkdir -p "$BS/programs" "$BSW"
cp "$TD/config.toml" "$BS/config.toml"
cp "$BT"/programs/p0000[1-9].toml "$BT/programs/p00010.toml" "$BS/programs/"
head -11 "$BW/hooks.json" | sed '$ s/,$//' >"$BSW/hooks.json"
echo "]" >>"$BSW/hooks.json"
# reload_trigd_trial DIR K: program 900000+K written into DIR's programs
# directory, then polled for (RELOAD_MS).
reload_trigd_trial() {
    local id=$((900000 + $2)) content
    content=$(printf 'id = %d\nname = "r%d"\n\n[[functions]]\nname = "run"\ncommand = ["/bin/true"]\n[functions.webhook]\n' "$id" "$2")
    now_us; t0=$NOW_US
    printf '%s\n' "$content" >"$1/programs/r$2.toml"
    reload_wait "$T_PORT" "/api?api_key=$KEY&program_id=$id" "$t0"
}
# reload_webhook_trial DIR K: hook rK appended to RELOAD_HOOKS and DIR's
# hooks file rewritten with them, then polled for (RELOAD_MS). Answered
# when /bin/true has ended, as trigd's sync call is (and as the reload case
# above): without include-command-output-in-response webhook answers
# before it starts the command, ~1 ms less (2.1 against 3.5 ms in one run
# of 2026-11-27).
reload_webhook_trial() {
    local content
    RELOAD_HOOKS+='
  {"id": "r'"$2"'", "execute-command": "/bin/true", "include-command-output-in-response": true},'
    content=$(printf '%s\n' "${RELOAD_HOOKS%,}" "]")
    now_us; t0=$NOW_US
    printf '%s\n' "$content" >"$1/hooks.json"
    reload_wait "$W_PORT" "/hooks/r$2" "$t0"
}
# Both servers run side by side and their trials alternate (which goes
# first alternates too), as in the reload case above: a slower spell of
# the machine falls on both. Among 10, three times $RELOAD_TRIALS trials,
# as above.
want reloadmany && for many in 10 "$NPROGRAMS"; do
    if ((many == 10)); then tdir=$BS wdir=$BSW trials=$((3 * RELOAD_TRIALS)); else tdir=$BT wdir=$BW trials=$RELOAD_TRIALS; fi
    ((SKIP_TRIGD)) || { rm -rf "$tdir/state"; start_trigd "$tdir"; }
    cp "$wdir/hooks.json" "$wdir/hooks.orig"
    start_webhook "$wdir" -hotreload
    RELOAD_HOOKS=$(sed '$ d' "$wdir/hooks.orig" | sed '$ s/}$/},/')
    for ((k = 1; k <= trials; k++)); do
        order=("${SIDES[@]}")
        ((k % 2 == 0 && ${#SIDES[@]} == 2)) && order=(webhook trigd)
        for side in "${order[@]}"; do
            if [[ $side == trigd ]]; then reload_trigd_trial "$tdir" "$k"; else reload_webhook_trial "$wdir" "$k"; fi
            add "reload$many.$side" "$RELOAD_MS"
            snooze 0.3
        done
    done
    if ! ((SKIP_TRIGD)); then
        stop_pid "$T_PID"; forget_pid "$T_PID"
        rm -f "$tdir"/programs/r*.toml
    fi
    stop_pid "$W_PID"; forget_pid "$W_PID"
    mv "$wdir/hooks.orig" "$wdir/hooks.json"
    for side in "${SIDES[@]}"; do log "  $side, $many definitions: $(med "reload$many.$side") ms ($trials trials)"; done
done

# ---------------------------------------------------------------- schedules (trigd only)
# bench/schedules.sh: N schedules firing at once while wrk keeps sync runs
# going on the same server (the share accepted within 50 ms of their
# occurrence), and 10,000 idle schedules (CPU, memory). Quick: 200
# schedules every second; full: 1,000 every minute (about 2.5 min).
if ! ((SKIP_TRIGD)) && want schedules; then
    if ((QUICK)); then
        sched_env=(BENCH_SCHEDULES=200 BENCH_SCHED_EVERY=second BENCH_FIRINGS=3 BENCH_IDLE=3)
    else
        sched_env=(BENCH_SCHEDULES=1000 BENCH_SCHED_EVERY=minute BENCH_FIRINGS=2 BENCH_IDLE=30)
    fi
    log "case schedules: ${sched_env[*]}"
    result=$(env "${sched_env[@]}" bash "$BENCH_DIR/schedules.sh" "$TRIGD" 2>>"$WORK/schedules.err" | tee -a "$WORK/schedules.out" | sed -n 's/^RESULT //p') || true
    [[ -n $result ]] || CASE_ERRORS+=("schedules: bench/schedules.sh printed no result ($(tail -2 "$WORK/schedules.err" 2>/dev/null))")
    for kv in $result; do add "sched.${kv%%=*}" "${kv#*=}"; done
    add sched.count "${sched_env[0]#*=}"
    add sched.every "${sched_env[1]#*=}"
    log "  $result"
fi

# ---------------------------------------------------------------- 1,000 tools of 3 environments
# trigd: 1,000 [[tools]] in config.toml, each with environments dev, staging
# and prod and one endpoint trigger (3,000 generated endpoints); webhook:
# the 3,000 hooks those endpoints stand for.
NTOOLS=1000
log "case tools: $NTOOLS tools x 3 environments, $START_TRIALS trials each"
TT=$WORK/tools-trigd
TW=$WORK/tools-webhook
mkdir -p "$TT/programs" "$TW"
cp "$TD/programs/true.toml" "$TD/programs/github.toml" "$TT/programs/"
awk -v n="$NTOOLS" -v base="$TD/config.toml" -v cfg="$TT/config.toml" -v hooks="$TW/hooks.json" 'BEGIN {
    while ((getline line < base) > 0) print line > cfg
    printf "\n[[workspaces]]\nname = \"ws\"\n" > cfg
    printf "[\n" > hooks
    for (i = 1; i <= n; i++) {
        printf "\n[[tools]]\nname = \"t%d\"\nworkspace = \"ws\"\n", i > cfg
        printf "[tools.environments.dev]\npublic = true\n[tools.environments.staging]\npublic = true\n" > cfg
        printf "[tools.environments.prod]\npublic = true\n" > cfg
        printf "[[tools.triggers]]\nkind = \"endpoint\"\nname = \"run\"\nprogram = 1\nfunction = \"run\"\n" > cfg
        for (e = 1; e <= 3; e++)
            printf "  {\"id\": \"t%d-e%d-run\", \"execute-command\": \"/bin/true\"}%s\n", i, e, (i < n || e < 3 ? "," : "") > hooks
    }
    printf "]\n" > hooks
}'
want tools && for ((k = 1; k <= START_TRIALS; k++)); do
    for side in "${SIDES[@]}"; do
        if [[ $side == trigd ]]; then
            rm -rf "$TT/state"
            start_timed trigd "$TT"
            T_PID=$PID T_PORT=$PORT
            http_status POST "$T_PORT" "/tools/t$NTOOLS/prod/run"
            [[ $HTTP_STATUS == 200 ]] || log "  warning: trigd /tools/t$NTOOLS/prod/run gave $HTTP_STATUS"
            ((k == 1)) && { read -r v h < <(mem_of "$T_PID"); add rss_tools.trigd "$v"; }
            stop_pid "$T_PID"; forget_pid "$T_PID"
        else
            start_timed webhook "$TW"
            W_PID=$PID W_PORT=$PORT
            http_status POST "$W_PORT" "/hooks/t$NTOOLS-e3-run"
            [[ $HTTP_STATUS == 200 ]] || log "  warning: webhook /hooks/t$NTOOLS-e3-run gave $HTTP_STATUS"
            ((k == 1)) && { read -r v h < <(mem_of "$W_PID"); add rss_tools.webhook "$v"; }
            stop_pid "$W_PID"; forget_pid "$W_PID"
        fi
        add "start_tools.$side" "$(calc "$STARTUP_US / 1000")"
    done
done

# ---------------------------------------------------------------- run list over 1,000,000 runs
# trigd only: GET /api/runs over a state dir of 1,000,000 runs (10 programs,
# 4 states, tool and schedule origins mixed in), one connection, each query
# for SECS: the p99 of a filtered page must stay within 20 ms (nomatch
# matches no run: the whole index is searched). The index's
# memory: VmRSS with the 1,000,000 runs minus VmRSS with none, per run.
RUNLIST_N=${BENCH_RUNLIST_RUNS:-$d_runlist}
RL=$WORK/runlist
if ! ((SKIP_TRIGD)) && want runlist; then
    log "case runlist: $RUNLIST_N runs in the state dir, GET /api/runs, ${SECS}s a query"
    mkdir -p "$RL/programs" "$RL/state"
    { trigd_base_config "$SHA" "$MAX_RUNS" | sed "s/^workers = 8$/workers = 8\nrun_retention = $((RUNLIST_N * 2))/"; } >"$RL/config.toml"
    for p in $(seq 1 10); do
        printf 'id = %d\nname = "p%d"\n\n[[functions]]\nname = "deploy"\ncommand = ["/bin/true"]\n[functions.webhook]\n\n[[functions]]\nname = "backup"\ncommand = ["/bin/true"]\n[functions.webhook]\n' \
            "$p" "$p" >"$RL/programs/p$p.toml"
    done
    main_pid=$T_PID main_port=$T_PORT
    start_trigd "$RL"
    snooze 1
    read -r v _ < <(mem_of "$T_PID"); add runlist.rss0 "$v"
    stop_pid "$T_PID"; forget_pid "$T_PID"
    rm -rf "$RL/state"; mkdir -p "$RL/state"
    # CreatedAt one millisecond apart from 2026-11-20T10:00:00Z.
    awk -v n="$RUNLIST_N" 'BEGIN {
        split("finished failed timed_out cancelled", st, " ")
        base = 1795168800
        for (i = 0; i < n; i++) {
            s = base + int(i / 1000); ms = i % 1000
            t = strftime("%Y-%m-%dT%H:%M:%S", s, 1) sprintf(".%03dZ", ms)
            by = (i % 5 == 0) ? "schedule:" (i % 10 + 1) "/backup/nightly" : "api_key:bench"
            tool = (i % 10 == 3) ? ",\"Tool\":\"inventory/staging\"" : ""
            printf "{\"Run\":\"bench-%032x\",\"State\":\"%s\",\"Owner\":\"program\",\"Program\":%d,\"Function\":\"%s\",\"Async\":true,\"By\":\"%s\"%s,\"CreatedAt\":\"%s\",\"StartedAt\":\"%s\",\"FinishedAt\":\"%s\",\"Steps\":[{\"DurationMs\":3,\"ExitCode\":0,\"Kind\":\"command\",\"StderrTruncated\":false,\"StdoutTruncated\":false}],\"Result\":[\"ok %d\"]}\n", \
                i, st[i % 4 + 1], i % 10 + 1, (i % 2 ? "deploy" : "backup"), by, tool, t, t, t, i
        }
    }' >"$RL/state/runs.log"
    START_BOUND_S=900 start_trigd "$RL"
    add runlist.start "$(calc "$STARTUP_US / 1000")"
    T_BASE_RL=http://127.0.0.1:$T_PORT
    snooze 1
    read -r v _ < <(mem_of "$T_PID"); add runlist.rss1 "$v"
    mid=$(printf '%d.%032x' $((1795168800000 + RUNLIST_N / 2)) $((RUNLIST_N / 2)))
    RUNLIST_QUERIES=(
        "newest:limit=50"
        "program_state:program=7&state=timed_out&limit=50"
        "function_origin:function=deploy&origin=schedule&limit=200"
        "tool_cursor:tool=inventory&state=failed&limit=50&cursor=$mid"
        "window:program=3&since=2026-11-20T10:05:00Z&until=2026-11-20T10:06:00Z&limit=100"
        "nomatch:program=7&state=failed&limit=50"
    )
    export WRK_METHOD=GET
    # The machine's floor: the p99 of GET /healthz (no work) on the same
    # server just before the queries; on a loaded machine the queries'
    # p99 cannot be below it.
    run_wrk "$WORK/wrk/runlist-healthz.txt" 1 "$SECS" "$T_BASE_RL/healthz" 200
    add runlist.healthz.p99 "$WR_P99"
    log "  healthz (floor): $WR_RPS/s p50 ${WR_P50}ms p99 ${WR_P99}ms"
    for q in "${RUNLIST_QUERIES[@]}"; do
        qn=${q%%:*}
        run_wrk "$WORK/wrk/runlist-$qn.txt" 1 "$SECS" "$T_BASE_RL/api/runs?api_key=$KEY&${q#*:}" 200
        add "runlist.$qn.p99" "$WR_P99"
        add "runlist.$qn.rps" "$WR_RPS"
        [[ $WR_OTHER == - && $WR_ERRS == 0 ]] || add "runlist.$qn.note" "other=$WR_OTHER,sockerr=$WR_ERRS"
        log "  $qn: $WR_RPS/s p50 ${WR_P50}ms p99 ${WR_P99}ms (other $WR_OTHER)"
    done
    unset WRK_METHOD
    stop_pid "$T_PID"; forget_pid "$T_PID"
    T_PID=$main_pid T_PORT=$main_port
    rm -rf "$RL/state"
fi

# ---------------------------------------------------------------- PostgreSQL
# The database backend against the embedded one, and 1-3 instances on one
# database behind HAProxy (bench/pg.sh).
if ! ((SKIP_TRIGD)) && want pg; then pg_case; fi

# ---------------------------------------------------------------- table
ROWS=()
VERDICTS=()
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"); }
verdict() { # OK(0/1) -> V (pass/short), counted in VERDICTS
    V=short
    (($1)) && V=pass
    VERDICTS+=("$V")
    return 0
}
passif() { if "$@"; then echo 1; else echo 0; fi; }

tm() { if ((SKIP_TRIGD)); then echo nan; else med "$1"; fi; }
# cpu_row LABEL METRIC NAME FIELD: a per-call CPU row (µs, informational:
# no target) of the samples NAME.trigd.FIELD and NAME.webhook.FIELD
cpu_row() {
    local t w
    t=$(tm "$3.trigd.$4"); w=$(med "$3.webhook.$4")
    row "$1" "$2" "$(fmt "$t" %.1f)" "$(fmt "$w" %.1f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
}
# cpu_rows LABEL NAME: the server's own CPU and its children's per call
cpu_rows() {
    cpu_row "$1" "server CPU per call, µs (user+sys)" "$2" cpu
    cpu_row "$1" "children CPU per call, µs" "$2" ccpu
}

for name in true1 true8 true32 echo8 echo32 reject8 signed8 badsig8; do
    case $name in
    true1) label="sync /bin/true, 1 conn" ;;
    true8) label="sync /bin/true, 8 conns" ;;
    true32) label="sync /bin/true, 32 conns" ;;
    echo8) label="sync /bin/echo a b, 8 conns" ;;
    echo32) label="sync /bin/echo a b, 32 conns" ;;
    reject8) label="rejected (bad key / rule mismatch), 8 conns" ;;
    signed8) label="signed GitHub push (8.5 KB, HMAC-SHA256, 1 rule) → /bin/true, 8 conns" ;;
    badsig8) label="GitHub push, bad signature (trigd 403, webhook 500), 8 conns" ;;
    esac
    t=$(tm "$name.trigd.rps"); w=$(med "$name.webhook.rps"); q=$(ratio "$t" "$w")
    target="" res=""
    if [[ $name == true8 || $name == reject8 ]]; then
        target="≥ 1.50× webhook"; verdict "$(passif ge "$q" 1.5)"; res=$V
    fi
    row "$label" "req/s" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$q" %.2f×)" "$target" "$res"
    cpu_rows "$label" "$name"
    row "$label" "p50 ms" "$(fmt "$(tm "$name.trigd.p50")" %.2f)" "$(fmt "$(med "$name.webhook.p50")" %.2f)" "" "" ""
    row "$label" "p99 ms" "$(fmt "$(tm "$name.trigd.p99")" %.2f)" "$(fmt "$(med "$name.webhook.p99")" %.2f)" "" "" ""
    if [[ $name != reject8 && $name != badsig8 ]]; then
        # Every sync request must be answered 200: a refusal, another
        # status or a socket error counts against trigd.
        tn=$(if ((SKIP_TRIGD)); then echo nan; else printf '%s\n' ${S[$name.trigd.notok]:-} | sort -g | tail -1; fi)
        wn=$(printf '%s\n' ${S[$name.webhook.notok]:-} | sort -g | tail -1)
        verdict "$(passif awk -v a="$tn" 'BEGIN { exit !(a != "nan" && a + 0 == 0) }')"
        row "$label" "not 200 or socket error, fraction (worst round)" "$(fmt "$tn" %.4f)" "$(fmt "$wn" %.4f)" "" "trigd = 0" "$V"
    fi
    if [[ $name == echo8 || $name == echo32 ]]; then
        verdict "$(passif le "$(tm "$name.trigd.p99")" "$(med "$name.webhook.p99")")"
        row "$label" "p99 ms (target)" "$(fmt "$(tm "$name.trigd.p99")" %.2f)" "$(fmt "$(med "$name.webhook.p99")" %.2f)" "" "trigd ≤ webhook" "$V"
    fi
    if [[ $name == true32 ]]; then
        # Callers are cron jobs: a burst waits for a slot instead of a 503.
        tr=$(if ((SKIP_TRIGD)); then echo nan; else printf '%s\n' ${S[true32.trigd.refused]:-} | sort -g | tail -1; fi)
        wr=$(printf '%s\n' ${S[true32.webhook.refused]:-} | sort -g | tail -1)
        verdict "$(passif awk -v a="$tr" 'BEGIN { exit !(a == "0") }')"
        row "$label" "refused (503, worst round)" "$(fmt "$tr" %.0f)" "$(fmt "$wr" %.0f)" "" "trigd = 0" "$V"
        verdict "$(passif le "$(tm true32.trigd.p99)" "$(med true32.webhook.p99)")"
        row "$label" "p99 ms (target)" "$(fmt "$(tm true32.trigd.p99)" %.2f)" "$(fmt "$(med true32.webhook.p99)" %.2f)" "" "trigd ≤ webhook" "$V"
    fi
    if [[ $name == true1 ]]; then
        f1=$(med floor.1)
        row "$label" "vs spawn floor, 1 proc ($(fmt "$f1" %.0f)/s)" "$(fmt "$(ratio "$t" "$f1")" %.2f×)" "$(fmt "$(ratio "$w" "$f1")" %.2f×)" "" "" ""
    fi
    if [[ $name == true8 ]]; then
        f2=$(med floor.2)
        qt=$(ratio "$t" "$f2")
        verdict "$(passif ge "$qt" 0.9)"
        row "$label" "vs spawn floor, 2 procs ($(fmt "$f2" %.0f)/s)" "$(fmt "$qt" %.2f×)" "$(fmt "$(ratio "$w" "$f2")" %.2f×)" "" \
            "trigd ≥ 0.90× floor" "$V"
        verdict "$(passif le "$(tm true8.trigd.p99)" "$(med true8.webhook.p99)")"
        row "$label" "p99 ms (target)" "$(fmt "$(tm true8.trigd.p99)" %.2f)" "$(fmt "$(med true8.webhook.p99)" %.2f)" "" "trigd ≤ webhook" "$V"
    fi
done
if [[ ${BENCH_TLS:-1} != 0 ]]; then
    for name in tls_true8 tls_reject8 tls_new8; do
        case $name in
        tls_true8) label="HTTPS: sync /bin/true, 8 keep-alive conns" want=1.3 ;;
        tls_reject8) label="HTTPS: rejected (bad key / rule mismatch), 8 keep-alive conns" want=1.5 ;;
        tls_new8) label="HTTPS: new TLS connection per request (rejected, Connection: close), 8 conns" want=1.0 ;;
        esac
        t=$(tm "$name.trigd.rps"); w=$(med "$name.webhook.rps"); q=$(ratio "$t" "$w")
        verdict "$(passif ge "$q" "$want")"
        row "$label" "req/s" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$q" %.2f×)" "≥ $(fmt "$want" %.2f)× webhook" "$V"
        cpu_rows "$label" "$name"
        row "$label" "p50 ms" "$(fmt "$(tm "$name.trigd.p50")" %.2f)" "$(fmt "$(med "$name.webhook.p50")" %.2f)" "" "" ""
        tp=$(tm "$name.trigd.p99"); wp=$(med "$name.webhook.p99")
        verdict "$(passif le "$tp" "$wp")"
        row "$label" "p99 ms (target)" "$(fmt "$tp" %.2f)" "$(fmt "$wp" %.2f)" "" "trigd ≤ webhook" "$V"
    done
fi
want pg && pg_rows
row "spawn floor (posix_spawn+waitpid /bin/true)" "spawns/s, 1 proc" "$(fmt "$(med floor.1)" %.0f)" "" "" "" ""
row "spawn floor (posix_spawn+waitpid /bin/true)" "spawns/s, 2 procs" "$(fmt "$(med floor.2)" %.0f)" "" "" "" ""

A="async accept, 32 conns ${ASYNC_SECS}s"
t=$(tm async.trigd.exec_rate); w=$(med async.webhook.exec_rate); q=$(ratio "$t" "$w")
qa=$(ratio "$(tm async.trigd.accept_rate)" "$(med async.webhook.accept_rate)")
verdict "$(passif ge "$qa" 1)"
row "$A" "accepted (200)/s" "$(fmt "$(tm async.trigd.accept_rate)" %.0f)" "$(fmt "$(med async.webhook.accept_rate)" %.0f)" \
    "$(fmt "$qa" %.2f×)" "≥ 1.00× webhook" "$V"
cpu_row "$A" "server CPU per accepted call, µs (user+sys, during the load)" async cpu
row "$A" "p50 ms" "$(fmt "$(tm async.trigd.p50)" %.2f)" "$(fmt "$(med async.webhook.p50)" %.2f)" "" "" ""
verdict "$(passif le "$(tm async.trigd.p99)" "$(med async.webhook.p99)")"
row "$A" "p99 ms" "$(fmt "$(tm async.trigd.p99)" %.2f)" "$(fmt "$(med async.webhook.p99)" %.2f)" "" "trigd ≤ webhook" "$V"
row "$A" "accepted (200)" "$(fmt "$(tm async.trigd.accepted)" %.0f)" "$(fmt "$(med async.webhook.accepted)" %.0f)" "" "" ""
tr=$(if ((SKIP_TRIGD)); then echo nan; else printf '%s\n' ${S[async.trigd.refused]:-} | sort -g | tail -1; fi)
verdict "$(passif awk -v a="$tr" 'BEGIN { exit !(a == "0") }')"
row "$A" "refused (503, worst round)" "$(fmt "$tr" %.0f)" "$(fmt "$(med async.webhook.refused)" %.0f)" "" "trigd = 0 (default max_queued_runs)" "$V"
row "$A" "executed" "$(fmt "$(tm async.trigd.executed)" %.0f)" "$(fmt "$(med async.webhook.executed)" %.0f)" "" "" ""
verdict "$(passif ge "$q" 2)"
row "$A" "seconds from start until the last run was done" "$(fmt "$(tm async.trigd.drain)" %.1f)" "$(fmt "$(med async.webhook.drain)" %.1f)" "" "" ""
row "$A" "executed/s (until the last run)" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$q" %.2f×)" "≥ 2.00× webhook" \
    "$V"
cpu_row "$A" "children CPU per executed run, µs (from the load's start to the drain's end)" async ccpu
cpu_row "$A" "server CPU per executed run, µs (user+sys, from the load's start to the drain's end)" async cpurun
tl=$(if ((SKIP_TRIGD)); then echo nan; else printf '%s\n' ${S[async.trigd.lost]:-} | sort -g | tail -1; fi)
wl=$(printf '%s\n' ${S[async.webhook.lost]:-} | sort -g | tail -1)
verdict "$(passif awk -v a="$tl" 'BEGIN { exit !(a == "0") }')"
row "$A" "accepted but not executed (worst round)" "$(fmt "$tl" %.0f)" "$(fmt "$wl" %.0f)" "" "trigd = 0" \
    "$V"
tp=$(if ((SKIP_TRIGD)); then echo nan; else printf '%s\n' ${S[async.trigd.peak]:-} | sort -g | tail -1; fi)
wp=$(printf '%s\n' ${S[async.webhook.peak]:-} | sort -g | tail -1)
verdict "$(passif le "$tp" "$ASYNC_SLOTS")"
row "$A" "child processes at the peak (max of rounds)" "$(fmt "$tp" %.0f)" "$(fmt "$wp" %.0f)" "" "trigd ≤ $ASYNC_SLOTS" \
    "$V"

I="idempotent repeat: one Idempotency-Key, 8 conns"
row "$I" "answers (200)/s" "$(fmt "$(tm idem8.trigd.rps)" %.0f)" "n/a" "" "" ""
row "$I" "p50 / p99 ms" "$(fmt "$(tm idem8.trigd.p50)" %.2f) / $(fmt "$(tm idem8.trigd.p99)" %.2f)" "n/a" "" "" ""
ti=$(if ((SKIP_TRIGD)); then echo nan; else printf '%s\n' ${S[idem8.trigd.runs]:-} | sort -g | tail -1; fi)
verdict "$(passif awk -v a="$ti" 'BEGIN { exit !(a == "1") }')"
row "$I" "runs executed (worst round)" "$(fmt "$ti" %.0f)" "n/a" "" "trigd = 1" "$V"

t=$(tm rss_idle.trigd); w=$(med rss_idle.webhook); q=$(ratio "$t" "$w")
verdict "$(passif le "$q" 0.6)"
row "memory" "VmRSS idle, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$q" %.2f×)" "≤ 0.60× webhook" \
    "$V"
t=$(tm rss_sync.trigd); w=$(med rss_sync.webhook)
row "memory" "VmRSS after the sync cases, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
t=$(tm rss_load.trigd); w=$(med rss_load.webhook); q=$(ratio "$t" "$w")
verdict "$(passif le "$q" 0.1)"
row "memory" "VmRSS after load, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$q" %.2f×)" "≤ 0.10× webhook" \
    "$V"
t=$(tm hwm_load.trigd); w=$(med hwm_load.webhook)
row "memory" "VmHWM after load, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
t=$(tm rss_big.trigd); w=$(med rss_big.webhook)
verdict "$(passif le "$(ratio "$t" "$w")" 0.8)"
row "memory" "VmRSS with $NPROGRAMS programs/hooks, 1 s after the first 200, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "≤ 0.80× webhook" "$V"
t=$(tm rss_big0.trigd); w=$(med rss_big0.webhook)
row "memory" "VmRSS with $NPROGRAMS programs/hooks, at the first 200, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
t=$(tm hwm_big.trigd); w=$(med hwm_big.webhook)
row "memory" "VmHWM (peak) with $NPROGRAMS programs/hooks, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
tsize=nan
[[ -x $TRIGD ]] && ! ((SKIP_TRIGD)) && tsize=$(stat -c %s "$TRIGD")
wsize=$(stat -c %s "$(command -v webhook)")
# Issue 29: the static binary stays under 8 MiB (dist/check-size.sh fails CI).
verdict "$(passif lt "$tsize" 8388608)"
row "binary" "size, bytes" "$(fmt "$tsize" %.0f)" "$(fmt "$wsize" %.0f)" "$(fmt "$(ratio "$tsize" "$wsize")" %.2f×)" "trigd < 8 MiB (8388608)" "$V"

t=$(tm start.trigd); w=$(med start.webhook)
verdict "$(passif le "$(ratio "$t" "$w")" 0.8)"
row "start-up, $NPROGRAMS programs/hooks" "ms to first 200" "$(fmt "$t" %.1f)" "$(fmt "$w" %.1f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" \
    "≤ 0.80× webhook" "$V"
t=$(tm start.trigd-hooks)
row "start-up, the same hooks file of $NPROGRAMS hooks (trigd hooks_files)" "ms to first 200" "$(fmt "$t" %.1f)" "$(fmt "$w" %.1f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
t=$(tm rss_big.trigd-hooks); w=$(med rss_big.webhook)
row "memory" "VmRSS with the same hooks file of $NPROGRAMS hooks, 1 s after the first 200, KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
t=$(tm reload.trigd); w=$(med reload.webhook)
verdict "$(passif eval 'le "$t" 300 && lt "$t" "$w"')"
row "reload: new program / hook" "ms to first 200" "$(fmt "$t" %.1f)" "$(fmt "$w" %.1f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" \
    "trigd ≤ 300 ms and < webhook" "$V"

t=$(tm reload10.trigd); w=$(med reload10.webhook)
verdict "$(passif lt "$t" "$w")"
row "reload: new program / hook among 10" "ms to first 200" "$(fmt "$t" %.1f)" "$(fmt "$w" %.1f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" \
    "< webhook" "$V"
t2=$(tm "reload$NPROGRAMS.trigd"); w2=$(med "reload$NPROGRAMS.webhook")
verdict "$(passif le "$(ratio "$t2" "$w2")" 0.5)"
row "reload: new program / hook among $NPROGRAMS" "ms to first 200" "$(fmt "$t2" %.1f)" "$(fmt "$w2" %.1f)" "$(fmt "$(ratio "$t2" "$w2")" %.2f×)" \
    "≤ 0.50× webhook" "$V"
O="one run printing $OUT_MB MB on stdout, kept (max_output_bytes 128 MiB)"
t=$(tm out.trigd); w=$(med out.sh)
row "$O" "s from accept to the run's end, from its record (webhook column: sh -c 'yes | head -c … > file', same disk)" "$(fmt "$t" %.2f)" "$(fmt "$w" %.2f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
row "$O" "bytes kept in the output file" "$(fmt "$(tm out.kept)" %.0f)" "" "" "" ""
t=$(tm rss_out0.trigd)
row "$O" "trigd VmRSS idle / after / VmHWM after, KiB" "$(fmt "$t" %.0f) / $(fmt "$(tm rss_out.trigd)" %.0f) / $(fmt "$(tm hwm_out.trigd)" %.0f)" "" "" "" ""
row "one follower of a run printing $OUT_MB MB" "event-stream bytes/s delivered (curl -N)" "$(fmt "$(tm follow1.rate)" %.0f)" "n/a" "" "" ""
row "one follower of a run printing $OUT_MB MB" "trigd VmHWM after, KiB" "$(fmt "$(tm hwm_follow1.trigd)" %.0f)" "n/a" "" "" ""
F="100 followers of one run printing $((OUT_MB / 10)) MB"
row "$F" "followers that got the whole stream (worst round)" "$(if ((SKIP_TRIGD)); then echo n/a; else printf '%s\n' ${S[follow100.complete]:-} | sort -g | head -1; fi)" "n/a" "" "" ""
row "$F" "s from accept until the last follower ended" "$(fmt "$(tm follow100.secs)" %.2f)" "n/a" "" "" ""
row "$F" "event-stream bytes/s delivered, all followers" "$(fmt "$(tm follow100.rate)" %.0f)" "n/a" "" "" ""
row "$F" "trigd VmHWM after, KiB" "$(fmt "$(tm hwm_follow100.trigd)" %.0f)" "n/a" "" "" ""
t=$(tm rss_tools.trigd); w=$(med rss_tools.webhook)
row "memory" "VmRSS with $NTOOLS tools × 3 environments (3,000 endpoints/hooks), KiB" "$(fmt "$t" %.0f)" "$(fmt "$w" %.0f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""
t=$(tm start_tools.trigd); w=$(med start_tools.webhook)
row "start-up, $NTOOLS tools × 3 environments" "ms to first 200" "$(fmt "$t" %.1f)" "$(fmt "$w" %.1f)" "$(fmt "$(ratio "$t" "$w")" %.2f×)" "" ""

RLQ="GET /api/runs over $RUNLIST_N runs"
row "$RLQ" "start-up with them, ms to first 200" "$(fmt "$(tm runlist.start)" %.0f)" "n/a" "" "" ""
worst=nan
for qn in newest program_state function_origin tool_cursor window nomatch; do
    p=$(tm "runlist.$qn.p99")
    row "$RLQ" "$qn: p99 ms (req/s $(fmt "$(tm "runlist.$qn.rps")" %.0f))" "$(fmt "$p" %.2f)" "n/a" "" "" ""
    if [[ $worst == nan ]] || ge "$p" "$worst"; then worst=$p; fi
done
verdict "$(passif le "$worst" 20)"
row "$RLQ" "worst p99 of the filtered pages, ms" "$(fmt "$worst" %.2f)" "n/a" "" "≤ 20 ms" "$V"
row "$RLQ" "the machine's floor: GET /healthz p99 ms, just before" "$(fmt "$(tm runlist.healthz.p99)" %.2f)" "n/a" "" "" ""
rlb=$(awk -v a="$(tm runlist.rss1)" -v b="$(tm runlist.rss0)" -v n="$RUNLIST_N" 'BEGIN { if (a == "nan" || b == "nan" || a == "" || b == "") print "nan"; else printf "%.1f", (a - b) * 1024 / n }')
verdict "$(passif le "$rlb" 64)"
row "$RLQ" "VmRSS with them minus VmRSS with none, bytes a run" "$(fmt "$rlb" %.1f)" "n/a" "" "≤ 64" "$V"
if want schedules && ! ((SKIP_TRIGD)); then
    SC="$(med sched.count) schedules firing every $(printf '%s' ${S[sched.every]:-}) + sync /bin/true, 8 conns ($(fmt "$(med sched.syncrps)" %.0f) req/s)"
    share=$(awk -v a="$(med sched.within50)" -v b="$(med sched.firings)" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "nan" }')
    verdict "$(passif ge "$share" 0.99)"
    row "$SC" "firings accepted within 50 ms of their occurrence" "$(med sched.within50) of $(med sched.firings)" "n/a" "$(fmt "$(calc "$share * 100")" %.1f)%" "≥ 99% (p99 ≤ 50 ms)" "$V"
    verdict "$(passif le "$(med sched.idlecpu)" 0.5)"
    row "10,000 idle schedules" "CPU, % of a core" "$(med sched.idlecpu)" "n/a" "" "≤ 0.5%" "$V"
    per=$(calc "($(med sched.kib10k) - $(med sched.kib0)) / 10000")
    verdict "$(passif le "$per" 1)"
    row "10,000 idle schedules" "VmRSS over none, KiB a schedule" "$(fmt "$per" %.2f)" "n/a" "" "≤ 1 KiB" "$V"
fi

npass=0 nshort=0
for v in "${VERDICTS[@]}"; do if [[ $v == pass ]]; then npass=$((npass + 1)); else nshort=$((nshort + 1)); fi; done

NOTES=()
for k in "${!S[@]}"; do
    [[ $k == *.note ]] && NOTES+=("- ${k%.note}:${S[$k]:-}")
done

# What follows "## Measured by hand" in the results file (figures not
# measured by this script) is kept.
KEPT=""
[[ -f $RESULTS ]] && KEPT=$(sed -n '/^## Measured by hand/,$p' "$RESULTS")
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
TCOMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
    echo "# trigd benchmark results"
    echo
    echo "Machine: $(nproc) CPUs, ${CPU:-unknown CPU}, Linux $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC');" \
        "load average at start $LOAD_START; open files limit (ulimit -n) $(ulimit -n)."
    echo "trigd $TCOMMIT ($( [[ -n ${BENCH_TRIGD:-} ]] && echo "$TRIGD" || echo "static build, \`cargo static\`")), $(webhook -version 2>&1 | head -1), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)."
    echo "Settings: $SECS s per measurement, $ROUNDS interleaved rounds (A/B/A/B) per case, async ${ASYNC_SECS}s x $ASYNC_ROUNDS," \
        "$NPROGRAMS programs for start-up ($START_TRIALS trials), $((3 * RELOAD_TRIALS)) reloads alone and among 10, $RELOAD_TRIALS among $NPROGRAMS;" \
        "figures are medians over rounds. trigd max_concurrent_runs = $SLOTS$([[ -z $MAX_RUNS ]] && echo ' (its default)') (async runs at most $ASYNC_SLOTS), workers = 8.$( ((QUICK)) && echo ' QUICK smoke run: not a measurement.')"
    echo "Rerun: \`bench/run.sh\` (see bench/README.md). Ratios are trigd/webhook (or trigd/floor)."
    echo
    echo "| case | metric | trigd | webhook | ratio | target | result |"
    echo "|---|---|---:|---:|---:|---|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "Targets: $npass pass, $nshort short."
    if ((${#NOTES[@]})); then
        echo
        echo "Responses other than the expected status (status:count), socket errors, per round:"
        echo
        printf '%s\n' "${NOTES[@]}" | sort
    fi
    if [[ -n $KEPT ]]; then
        echo
        printf '%s\n' "$KEPT"
    fi
} >"$RESULTS"

echo
cat "$RESULTS"
echo
log "wrote $RESULTS"

# Every case that ran must have given its figures: a trigd cell of n/a
# (nothing measured) fails the run, so that a case cannot rot unnoticed.
if ! ((SKIP_TRIGD)); then
    for r in "${ROWS[@]}"; do
        IFS='|' read -r _ c m t _ <<<"$r"
        [[ $t == *n/a* ]] || continue
        want_row=1
        [[ -n $ONLY ]] && want_row=0 # figures of cases not run are n/a
        ((want_row)) && CASE_ERRORS+=("no figure:$c:$m")
    done
fi
if ((${#CASE_ERRORS[@]})); then
    printf '%s\n' "${CASE_ERRORS[@]}" | sed 's/^/bench: case error: /' >&2
    FAILED=1
    exit 1
fi
