#!/usr/bin/env bash
# Build the Debian package of trigd (docs/packaging.md):
#   dist/build-deb.sh        → target/debian/trigd_<version>-1_amd64.deb
# Needs cargo-deb (`cargo install cargo-deb --locked`). The static binary is
# built by `cargo static` (nothing to do when it is up to date); the man
# pages and completions are printed by that binary (`trigd generate`), so
# they describe exactly the binary packaged. Extra arguments go to cargo deb
# (e.g. --deb-revision 2).
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
cargo static
bin=target/$target/release/trigd

out=target/deb-assets
rm -rf "$out"
mkdir -p "$out"
"$bin" generate man > "$out/trigd.1"
"$bin" generate man-config > "$out/trigd.toml.5"
"$bin" generate complete-bash > "$out/trigd.bash"
"$bin" generate complete-zsh > "$out/_trigd"
"$bin" generate complete-fish > "$out/trigd.fish"
# The unit for /usr/bin (the comments keep the by-hand instructions).
sed -e '/^#/!s|/usr/local/bin/trigd|/usr/bin/trigd|g' \
    -e 's|^Documentation=.*|Documentation=man:trigd(1) man:trigd.toml(5) file:///usr/share/doc/trigd/README.md|' \
    dist/trigd.service > "$out/trigd.service"

cargo deb --no-build --target "$target" "$@"
