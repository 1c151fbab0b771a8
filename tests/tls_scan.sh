#!/usr/bin/env bash
# trigd's HTTPS listener scanned by real TLS scanners from Debian:
# `sslscan` (protocols, every cipher suite, renegotiation, heartbleed) and
# `testssl` (TLS compression / CRIME, renegotiation, as a second opinion).
#
#   tests/tls_scan.sh [TRIGD]
#
# TRIGD is the binary (default target/debug/trigd). The server runs on a
# free port of 127.0.0.1 with a fresh RSA 2048 and an ECDSA P-256
# certificate (one after the other) in a temporary directory. Fails when a
# protocol below TLS 1.2 is accepted, a cipher suite that is not AEAD with
# forward secrecy (or under 128 bits) is accepted, compression is offered,
# or insecure renegotiation is supported. SCAN_KEEP=1 keeps the directory
# (the scanners' full output).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
trigd="${1:-$repo/target/debug/trigd}"
for tool in sslscan testssl openssl; do
  command -v "$tool" >/dev/null || { echo "tls_scan: $tool not found (apt-get install sslscan testssl.sh openssl)" >&2; exit 2; }
done

dir="$(mktemp -d -t trigd-tls-scan.XXXXXX)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  if [ "${SCAN_KEEP:-}" = 1 ]; then echo "kept $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT

fail=0
bad() { echo "tls_scan: FAIL ($1): $2" >&2; fail=1; }

scan() { # $1: openssl -newkey argument(s) label
  local label="$1"; shift
  rm -rf "$dir/$label" && mkdir -p "$dir/$label/programs" && cd "$dir/$label"
  openssl req -x509 "$@" -nodes -keyout key.pem -out cert.pem -days 30 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
  printf '[server]\ntls_cert = "cert.pem"\ntls_key = "key.pem"\n' > config.toml
  "$trigd" serve --config config.toml --listen 127.0.0.1:0 > out.txt 2> err.txt &
  pid=$!
  local addr=""
  for _ in $(seq 100); do
    addr=$(sed -n 's|^listening on https://||p' out.txt)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { cat err.txt >&2; bad "$label" "trigd did not start"; return; }
  local port=${addr##*:}

  sslscan --no-colour --show-sigs "localhost:$port" > sslscan.txt 2>&1 || true
  grep -E '^(SSLv2|SSLv3|TLSv1\.0|TLSv1\.1) +enabled' sslscan.txt && bad "$label" "a protocol below TLS 1.2 is enabled"
  grep -Eq '^TLSv1\.2 +enabled' sslscan.txt || bad "$label" "TLS 1.2 is not enabled"
  grep -Eq '^TLSv1\.3 +enabled' sslscan.txt || bad "$label" "TLS 1.3 is not enabled"
  # Every accepted suite: AEAD (GCM, CHACHA20-POLY1305) with ECDHE (1.2)
  # or a TLS 1.3 suite, at least 128 bits.
  grep -E '^(Preferred|Accepted)' sslscan.txt | while read -r _ proto bits _ suite _; do
    if [ "$bits" -lt 128 ] || ! [[ "$suite" =~ ^(TLS_AES_|TLS_CHACHA20_|ECDHE-(RSA|ECDSA)-(AES(128|256)-GCM|CHACHA20-POLY1305)) ]]; then
      echo "tls_scan: FAIL ($label): weak suite $proto $bits $suite" >&2
      echo weak >> weak.txt
    fi
  done
  [ -f weak.txt ] && fail=1
  grep -q 'Insecure session renegotiation supported' sslscan.txt && bad "$label" "insecure renegotiation"
  grep -qi 'Compression enabled' sslscan.txt && bad "$label" "compression (sslscan)"

  testssl --quiet --color 0 --warnings off -C -R "localhost:$port" > testssl.txt 2>&1 || true
  grep -E 'CRIME, TLS' testssl.txt | grep -qi 'not vulnerable' || bad "$label" "TLS compression (CRIME) not ruled out by testssl"
  grep -E 'Secure Renegotiation \(RFC 5746\)' testssl.txt | grep -q 'supported (OK)' || bad "$label" "secure renegotiation (RFC 5746) not confirmed by testssl"
  grep -E 'Secure Client-Initiated Renegotiation' testssl.txt | grep -q 'VULNERABLE' && bad "$label" "client-initiated renegotiation"

  echo "== $label: sslscan =="
  sed -n '/SSL\/TLS Protocols:/,/SSL Certificate:/p' sslscan.txt | grep -v '^$'
  echo "== $label: testssl -C -R =="
  grep -E 'CRIME|Renegotiation' testssl.txt || true
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=""
}

scan rsa -newkey rsa:2048
scan ecdsa -newkey ec -pkeyopt ec_paramgen_curve:P-256

[ "$fail" = 0 ] && echo "tls_scan: ok (TLS 1.2 and 1.3 only, AEAD suites with forward secrecy, no compression, no insecure renegotiation)"
exit "$fail"
