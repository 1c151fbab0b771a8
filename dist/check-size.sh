#!/usr/bin/env bash
# The static binary stays under 8 MiB (issue 29; docs/install.md, "Size"):
#   dist/check-size.sh [BINARY]   (default: the `cargo static` build)
# Fails, saying by how much, when BINARY is 8 MiB (8,388,608 bytes) or
# more. CI runs it on the binary it packages (dist/deb-test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/x86_64-unknown-linux-gnu/release/trigd}
limit=$((8 * 1024 * 1024))
[ -f "$bin" ] || { echo "check-size.sh: no binary at $bin (run cargo static)" >&2; exit 1; }
size=$(stat -c %s "$bin")
if ((size >= limit)); then
    echo "check-size.sh: FAIL: $bin is $size bytes, $((size - limit)) over the 8 MiB ($limit bytes)" \
        "limit of the static binary (issue 29; see docs/install.md, \"Size\", for what to trim)" >&2
    exit 1
fi
echo "check-size.sh: $bin is $size bytes, $((limit - size)) under 8 MiB"
