#!/usr/bin/env bash
# Build every fuzz target and run each, from its seeds, for a short bounded
# time, so that the targets cannot rot unnoticed (issue 27 point 11). Run by
# .ci/run; runs by hand too: `bash fuzz/ci.sh` (FUZZ_SECONDS=60 for longer).
#
# Time: FUZZ_SECONDS a target (20 by default), or FUZZ_BUDGET seconds for
# all the runs together, split evenly over the targets (at least 1 s
# each): CI gives a budget, so that a new target does not lengthen CI.
#
# Limits (libFuzzer's): -max_total_time those seconds a target, -timeout=1
# (an input taking over 1 s fails), -rss_limit_mb=256 (also each single
# allocation). Every target runs even when one fails; the script fails at
# the end naming them, and each failing input is in artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"

CARGO_FUZZ_VERSION=0.13.2

if ! cargo fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

# cargo-fuzz passes -Z flags (the sanitizer): the nightly toolchain when it
# is installed, else the stable one told to accept them (it ships the
# sanitizer runtime too).
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi

# FUZZ_OPT_LEVEL (3 by default, cargo-fuzz's): the optimisation of trigd
# and the crates the harnesses run. CI's short smoke run gives 1: a cold
# build spends a fifth less CPU and the runs execute about half the inputs
# (fuzz/README.md, "Build time"); the longer runs by hand keep 3.
export CARGO_PROFILE_RELEASE_OPT_LEVEL=${FUZZ_OPT_LEVEL:-3}

start=$SECONDS
TIMEFORMAT="fuzz: built every target (opt-level $CARGO_PROFILE_RELEASE_OPT_LEVEL) in %0R s, CPU %0U s user + %0S s sys"
time cargo "${toolchain[@]}" fuzz build

targets=$(cargo "${toolchain[@]}" fuzz list)
if [ -n "${FUZZ_BUDGET:-}" ]; then
  count=$(wc -w <<<"$targets")
  SECONDS_EACH=$((FUZZ_BUDGET / count > 0 ? FUZZ_BUDGET / count : 1))
else
  SECONDS_EACH=${FUZZ_SECONDS:-20}
fi

# AddressSanitizer keeps up to 256 MB of freed memory unused by default
# (its quarantine, to catch a use after free), which alone is the RSS
# limit: output_frames (inputs of 64 KiB, buffers of every size) passed it
# in its first seconds; with 32 MB it peaks near 150 MB.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=32}

corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
failed=()
for t in $targets; do
  mkdir -p "$corpus/$t" "artifacts/$t"
  echo "fuzz: $t for ${SECONDS_EACH} s"
  # No backtrace: symbolizing one reads the debug info (tens of MB) and
  # can push a failing run past -rss_limit_mb before its input is saved.
  if ! RUST_BACKTRACE=0 target/x86_64-unknown-linux-gnu/release/"$t" "$corpus/$t" "seeds/$t" \
    -max_total_time="$SECONDS_EACH" -rss_limit_mb=256 -timeout=1 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 2>"$corpus/$t.log"; then
    failed+=("$t")
    tail -n 40 "$corpus/$t.log"
  fi
  grep -E '^stat::number_of_executed_units|^Done|^#[0-9]+.*DONE' "$corpus/$t.log" || true
done
echo "fuzz: $((SECONDS - start)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
