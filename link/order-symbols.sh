#!/usr/bin/env bash
# link/order-symbols.sh — remake link/trigd.order from a run of the current code.
#
#   link/order-symbols.sh      then `cargo static` to link with the new order
#
# 1. `cargo static` with TRIGD_LINK_MAP set: the same binary, and its link map.
# 2. Runs that binary under valgrind's lackey, which logs the address of
#    every block of code it executes: start-up with the configuration
#    bench/run.sh measures idle memory with, GET /healthz, 2 s idle.
# 3. link/order_symbols.py maps the addresses to functions with the map and
#    writes link/trigd.order, the functions in the order the run reached them.
# Needs valgrind, python3 and curl. Why and what it saves: bench/README.md,
# "Idle memory". The build never depends on this: build.rs passes the file to
# the linker only when it exists, and names it no longer finds are skipped.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
for tool in valgrind python3 curl; do
    command -v "$tool" >/dev/null || { echo "order-symbols.sh: needs $tool" >&2; exit 1; }
done

OUT=$ROOT/target/x86_64-unknown-linux-gnu/release
BIN=$OUT/trigd
MAP=$OUT/trigd.map
WORK=$(mktemp -d)
PID=""
cleanup() {
    if [[ -n $PID ]]; then kill -KILL "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "order-symbols.sh: building with a link map ($MAP)" >&2
TRIGD_LINK_MAP=$MAP cargo static
[[ -s $MAP ]] || { echo "order-symbols.sh: no link map: is the static build linked by LLD?" >&2; exit 1; }

# ---- the configuration bench/run.sh measures idle memory with
# shellcheck source=bench/trigd-config.sh
source "$ROOT/bench/trigd-config.sh"
printf 'secret\n' >"$WORK/secret"
write_trigd_config "$WORK/cfg" "$(printf 'order-key' | sha256sum | cut -d' ' -f1)" 16 \
    "$WORK/secret" "$WORK/append.out" "$WORK/once.out"

# ---- the traced runs (three: threads interleave differently each time)
trace() { # N: one run, its superblocks in $WORK/trace.N
    local port="" i
    valgrind --tool=lackey --vex-guest-chase=no --trace-superblocks=yes \
        --log-file="$WORK/trace.$1" "$BIN" serve --config "$WORK/cfg/config.toml" \
        --listen 127.0.0.1:0 >"$WORK/out" 2>"$WORK/err" &
    PID=$!
    for ((i = 0; i < 1200; i++)); do
        port=$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/out")
        [[ -n $port ]] && break
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/err" >&2; exit 1; }
        sleep 0.05
    done
    [[ -n $port ]] || { echo "order-symbols.sh: no listening line in 60 s" >&2; exit 1; }
    curl -fsS -o /dev/null --max-time 30 "http://127.0.0.1:$port/healthz"
    sleep 2
    kill -KILL "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
}
echo "order-symbols.sh: tracing start-up, GET /healthz and 2 s idle under valgrind (3 runs)" >&2
for n in 1 2 3; do trace "$n"; done

python3 link/order_symbols.py "$BIN" "$MAP" "$WORK"/trace.? >"$WORK/order"
mv "$WORK/order" link/trigd.order
echo "order-symbols.sh: wrote link/trigd.order; \`cargo static\` links with it" >&2
