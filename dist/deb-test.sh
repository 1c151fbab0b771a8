#!/usr/bin/env bash
# CI: build the Debian package and the OCI image of trigd and try them on
# this machine, as root (docs/packaging.md). The package: dpkg -i, the
# binary, the config check, the man pages, the completions, the service run
# as its user with its config and called, systemd-analyze verify, an upgrade
# keeping an edited conffile, dpkg --purge. The image: its config and
# layers inspected, then run and called with podman (runc).
# Needs cargo-deb, man-db, systemd, curl; zsh and fish to check their
# completions; buildah, podman and runc for the image (else it is skipped,
# saying so). Both builds reuse one `cargo static`, which must stay under
# 8 MiB (dist/check-size.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "deb-test.sh: run as root" >&2; exit 1; }

step() { echo "== $*"; }
fail() { echo "deb-test.sh: FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

step "build the package"
dist/build-deb.sh >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "dist/build-deb.sh"; }
dist/check-size.sh || fail "the static binary is over 8 MiB"
deb=$(ls -t target/debian/trigd_*_amd64.deb | head -n 1)
echo "$deb ($(stat -c %s "$deb") bytes)"
dpkg --purge trigd >/dev/null 2>&1 || true

step "dpkg -i"
dpkg -i "$deb"
dpkg-deb -c "$deb" | awk '{print $6}'
trigd --version | grep -E '^trigd [0-9.]+ \(commit [0-9a-f]{12}(, dirty)?\)$' || fail "trigd --version"
trigd check --config /etc/trigd/config.toml
man -w trigd | grep -q '/usr/share/man/man1/trigd.1.gz' || fail "man -w trigd"
man -w 5 trigd.toml | grep -q '/usr/share/man/man5/trigd.toml.5.gz' || fail "man -w 5 trigd.toml"
MANWIDTH=80 man 1 trigd 2>&1 | grep -q 'trigd import-webhook' || fail "man trigd renders"
bash -n /usr/share/bash-completion/completions/trigd
if command -v zsh >/dev/null; then zsh -n /usr/share/zsh/vendor-completions/_trigd; else echo "(no zsh: _trigd not checked)"; fi
if command -v fish >/dev/null; then fish -n /usr/share/fish/vendor_completions.d/trigd.fish; else echo "(no fish: trigd.fish not checked)"; fi
# The bash completion, as bash calls it.
got=$(bash -c 'source /usr/share/bash-completion/completions/trigd
    COMP_WORDS=(trigd check --c); COMP_CWORD=2; _trigd; echo "${COMPREPLY[*]}"')
[ "$got" = "--config" ] || fail "bash completion of 'trigd check --c': '$got'"
id trigd
[ "$(stat -c '%U:%G %a' /var/lib/trigd)" = "trigd:trigd 700" ] || fail "/var/lib/trigd: $(stat -c '%U:%G %a' /var/lib/trigd)"
dpkg-query -W -f='${Conffiles}\n' trigd | grep -q '/etc/trigd/config.toml' || fail "config.toml is not a conffile"
dpkg-query -W -f='${Conffiles}\n' trigd | grep -q '/etc/trigd/programs/hello.toml' || fail "hello.toml is not a conffile"
grep -q '^listen = "127.0.0.1:' /etc/trigd/config.toml || fail "the default listens beyond loopback"
! grep -q api_keys /etc/trigd/config.toml || fail "the default has an API key"

step "user and group names with the static binary"
# Static glibc cannot load NSS modules: a name /etc/passwd does not hold
# made it dlopen Debian's next source (systemd) and crash (exit 139).
mkdir -p "$tmp/users/programs"
printf '[server]\nlisten = "127.0.0.1:0"\n' >"$tmp/users/config.toml"
printf 'id = 1\nname = "p"\n[[functions]]\nname = "a"\nuser = "trigd"\ngroup = "trigd"\ncommand = ["true"]\n' \
    >"$tmp/users/programs/p.toml"
trigd check --config "$tmp/users/config.toml" || fail "trigd check with user = \"trigd\""
printf 'id = 1\nname = "p"\n[[functions]]\nname = "a"\nuser = "no-such-user-trigd"\ncommand = ["true"]\n[[functions]]\nname = "b"\ngroup = "no-such-group-trigd"\ncommand = ["true"]\n' \
    >"$tmp/users/programs/p.toml"
rc=0
trigd check --config "$tmp/users/config.toml" >"$tmp/users/out" 2>&1 || rc=$?
cat "$tmp/users/out"
[ "$rc" = 1 ] || fail "trigd check with an unknown user and group: exit $rc, not 1"
grep -q 'no-such-user-trigd' "$tmp/users/out" && grep -q 'no-such-group-trigd' "$tmp/users/out" ||
    fail "trigd check does not name the unknown user and group"

step "systemd-analyze verify"
unit=$(dpkg -L trigd | grep '/systemd/system/trigd.service$')
socket=$(dpkg -L trigd | grep '/examples/trigd.socket$') || fail "no example trigd.socket in the package"
# A setting this systemd does not know is only a warning (it is ignored):
# any output fails, so the units mean here what they say.
systemd-analyze verify "$socket" "$unit" 2>&1 | tee "$tmp/verify"
[ ! -s "$tmp/verify" ] || fail "systemd-analyze verify printed warnings"
# An example, not enabled: the service serves [server] listen until the
# operator installs and enables the socket (docs/systemd.md).
[ ! -e /etc/systemd/system/sockets.target.wants/trigd.socket ] || fail "trigd.socket is enabled on install"

step "serve as the trigd user with the packaged config"
# An edit of the conffile, kept through the upgrades below: a key.
trigd keygen --name ci >>/etc/trigd/config.toml 2>"$tmp/key"
key=$(grep '^tk_' "$tmp/key")
trigd check --config /etc/trigd/config.toml
setpriv --reuid=trigd --regid=trigd --clear-groups --no-new-privs \
    /usr/bin/trigd serve --config /etc/trigd/config.toml --listen 127.0.0.1:0 \
    >"$tmp/serve.out" 2>"$tmp/serve.err" &
server=$!
for _ in $(seq 100); do
    grep -q '^listening on ' "$tmp/serve.out" && break
    kill -0 "$server" 2>/dev/null || { cat "$tmp/serve.err"; fail "trigd serve exited"; }
    sleep 0.1
done
url=$(sed -n 's/^listening on //p' "$tmp/serve.out")
[ -n "$url" ] || { cat "$tmp/serve.err"; fail "trigd serve did not listen"; }
curl -fsS "$url/healthz"; echo
out=$(curl -sS -X POST -H "Authorization: Bearer $key" "$url/api?program_id=1&variables=ci")
echo "$out"
echo "$out" | grep -q 'Hello, ci!' || fail "POST /api"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url/api?program_id=1&variables=x")
[ "$code" = 401 ] || fail "POST /api without a key: $code"
[ "$(stat -c %U /var/lib/trigd/runs.log)" = trigd ] || fail "runs.log is not the trigd user's"
kill "$server"; wait "$server" || true; server=

step "reinstall over itself, keeping the edited conffile"
dpkg -i --force-confold "$deb"
grep -q '^name = "ci"' /etc/trigd/config.toml || fail "the edit was lost"
[ "$(stat -c '%U %a' /var/lib/trigd)" = "trigd 700" ] || fail "state dir after reinstall"

step "upgrade to a version whose config.toml changed, keeping the edited conffile"
dpkg-deb -R "$deb" "$tmp/next"
sed -i 's/^Version: \(.*\)-\([0-9]*\)$/Version: \1-\2+next/' "$tmp/next/DEBIAN/control"
echo '# changed by the next version' >>"$tmp/next/etc/trigd/config.toml"
(cd "$tmp/next" && find etc usr -type f -exec md5sum {} + >DEBIAN/md5sums)
dpkg-deb -b "$tmp/next" "$tmp/next.deb" >/dev/null
dpkg -i --force-confold "$tmp/next.deb"
dpkg-query -W -f='${Version}\n' trigd | grep -q '+next$' || fail "not upgraded"
grep -q '^name = "ci"' /etc/trigd/config.toml || fail "the edit was lost"
grep -q 'changed by the next version' /etc/trigd/config.toml.dpkg-dist || fail "no .dpkg-dist"
trigd check --config /etc/trigd/config.toml

step "dpkg --purge"
dpkg -L trigd | sort >"$tmp/files"
dpkg --purge trigd
left=$(while read -r f; do [ -f "$f" ] && echo "$f"; done <"$tmp/files" || true)
[ -z "$left" ] || fail "left after purge: $left"
for p in /etc/trigd /var/lib/trigd /usr/bin/trigd; do
    [ ! -e "$p" ] || fail "$p is left after purge"
done
# Debian keeps system users on purge (files they own elsewhere must not
# pass to a later user given the same uid).
id trigd && echo "kept after purge: the system user trigd (Debian practice)"

step "OCI image"
if ! command -v buildah >/dev/null; then
    echo "(no buildah: the image is not built here)"
    exit 0
fi
dist/build-image.sh --archive target/trigd-image.tar >"$tmp/image.log" 2>&1 || { cat "$tmp/image.log"; fail "dist/build-image.sh"; }
image=$(tail -n 1 "$tmp/image.log")
ls -l target/trigd-image.tar
buildah inspect --type image "$image" | python3 -c 'import json, sys
print(json.dumps(json.load(sys.stdin)["OCIv1"]["config"], separators=(",", ":")))' | tee "$tmp/config.json"
grep -q '"User":"65532:65532"' "$tmp/config.json" || fail "image user"
grep -q '"/var/lib/trigd":{}' "$tmp/config.json" || fail "image volume"
grep -q '"Entrypoint":\["/usr/bin/trigd"\]' "$tmp/config.json" || fail "image entrypoint"
# One layer holding exactly these files.
mkdir "$tmp/oci" && tar -xf target/trigd-image.tar -C "$tmp/oci"
layers=$(python3 - "$tmp/oci" <<'PY'
import json, sys, os
root = sys.argv[1]
index = json.load(open(os.path.join(root, "index.json")))
digest = index["manifests"][0]["digest"].split(":")[1]
manifest = json.load(open(os.path.join(root, "blobs/sha256", digest)))
for layer in manifest["layers"]:
    print(os.path.join(root, "blobs/sha256", layer["digest"].split(":")[1]))
PY
)
for layer in $layers; do tar -tvf "$layer"; done | tee "$tmp/layers"
for f in usr/bin/trigd etc/ssl/certs/ca-certificates.crt etc/passwd etc/trigd/config.toml var/lib/trigd/; do
    grep -q " $f\$" "$tmp/layers" || fail "image lacks $f"
done
grep -E ' var/lib/trigd/$' "$tmp/layers" | grep -q '^drwx------ 65532/65532' || fail "image state dir owner/mode"
! grep -qE ' bin/sh$| usr/bin/sh$' "$tmp/layers" || fail "image has a shell"

# Runs in this sandbox with runc (crun refuses hybrid cgroups) and limits
# it may set (no CAP_SYS_RESOURCE).
podman=(podman)
command -v runc >/dev/null && podman+=(--runtime runc)
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
if ! "${podman[@]}" run --rm "${limits[@]}" "$image" --version >"$tmp/run.out" 2>&1; then
    cat "$tmp/run.out"
    echo "(podman cannot run containers here: the image was inspected, not run)"
    exit 0
fi
cat "$tmp/run.out"
"${podman[@]}" run --rm "${limits[@]}" "$image" run version | tee "$tmp/run.json"
grep -q '"Success"' "$tmp/run.json" || fail "trigd run in the image"
ctr=$("${podman[@]}" run -d "${limits[@]}" -p 127.0.0.1::8080 "$image")
port=$("${podman[@]}" port "$ctr" 8080 | sed 's/.*://')
ok=
for _ in $(seq 100); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >"$tmp/health" 2>/dev/null; then ok=1; break; fi
    sleep 0.1
done
"${podman[@]}" logs "$ctr" 2>&1 | head -n 5
"${podman[@]}" rm -f "$ctr" >/dev/null
[ -n "$ok" ] || fail "the image's /healthz"
cat "$tmp/health"; echo
echo "deb-test.sh: ok"
