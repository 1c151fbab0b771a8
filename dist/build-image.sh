#!/usr/bin/env bash
# Build the OCI image of trigd with buildah (Debian: apt install buildah),
# from the static binary (docs/packaging.md):
#   dist/build-image.sh                  → image localhost/trigd:<version>
#   dist/build-image.sh --archive FILE   → also FILE, an oci-archive to copy
#                                          elsewhere (podman load -i FILE)
set -euo pipefail
cd "$(dirname "$0")/.."

archive=
if [ "${1:-}" = --archive ]; then archive=$2; fi

target=x86_64-unknown-linux-gnu
cargo static
bin=target/$target/release/trigd
version=$("$bin" --version | awk '{print $2}')
revision=$("$bin" --version | sed -n 's/.*(commit \([^,)]*\).*/\1/p')

ctx=target/image
rm -rf "$ctx"
root=$ctx/rootfs
mkdir -p "$root/usr/bin" "$root/etc/ssl/certs" "$root/etc/trigd" "$root/var/lib" "$ctx/state"
install -m 0755 "$bin" "$root/usr/bin/trigd"
# For programs that call out over TLS; trigd itself bundles its roots.
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
# Time zones of schedules (trigd bundles none): the build host's tzdata,
# without the leap-second copies under right/ (about 2 MB).
if [ ! -f /usr/share/zoneinfo/Europe/Berlin ]; then
    echo "build-image: /usr/share/zoneinfo is missing: apt install tzdata" >&2
    exit 1
fi
mkdir -p "$root/usr/share"
tar -C /usr/share --exclude=zoneinfo/right -cf - zoneinfo | tar -C "$root/usr/share" -xf -
cp -r dist/image/config.toml dist/image/programs "$root/etc/trigd/"
chmod -R u=rwX,go=rX "$root/etc/trigd"
# The user (uid 65532, as distroless's nonroot) by name, for logs and `id`.
printf 'root:x:0:0:root:/root:/sbin/nologin\ntrigd:x:65532:65532:trigd:/var/lib/trigd:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\ntrigd:x:65532:\n' > "$root/etc/group"
# Temporary files of programs.
install -d -m 1777 "$root/tmp"
# One tar, owners set here (no root needed to build): root's files, then
# the state dir as the image user's, mode 0700.
tar=(tar --sort=name --mtime=@0 --numeric-owner)
"${tar[@]}" --owner=0 --group=0 -C "$root" -cf "$ctx/rootfs.tar" .
"${tar[@]}" --owner=65532 --group=65532 --mode=0700 -C "$ctx" \
    --transform 's|^state|./var/lib/trigd|' -rf "$ctx/rootfs.tar" state
rm -rf "$root" "$ctx/state"

# --timestamp 0: the same files give the same image.
buildah build --layers=false --timestamp 0 -f dist/Containerfile \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    -t "localhost/trigd:$version" "$ctx"
if [ -n "$archive" ]; then
    rm -f "$archive"
    buildah push "localhost/trigd:$version" "oci-archive:$archive:trigd:$version"
fi
echo "localhost/trigd:$version"
