#!/usr/bin/env bash
# Property-based API test of a live trigd against its own openapi.json, with
# Schemathesis (https://schemathesis.readthedocs.io). Not part of CI: it needs
# PyPI (first run) and takes a minute or two.
#
#   bench/schemathesis.sh                 # defaults below
#   ST_MAX_EXAMPLES=50 ST_MAX_TIME=300 bench/schemathesis.sh
#   ST_NO_BROWSER=1 bench/schemathesis.sh # skip the browser pages (tag browser)
#   bench/schemathesis.sh --seed 42       # extra arguments go to `st run`
#   ST_KEEP=1 bench/schemathesis.sh       # keep the temp dir (trigd.log has
#                                         # every request in its access log)
#
# What it does:
#   1. builds trigd (`cargo build`; honours CARGO_TARGET_DIR) unless TRIGD_BIN
#      names a binary;
#   2. creates a venv (ST_VENV, default $XDG_CACHE_HOME/trigd-schemathesis-venv)
#      and installs schemathesis 4.x into it, once;
#   3. writes a temporary config: programs that echo their values, one that
#      exits non-zero, one that times out, one with two triggered functions,
#      one without trigger; a tool `kit` with a public and a protected
#      environment and one trigger per method; an API key and a member's
#      application key;
#   4. starts trigd on 127.0.0.1:<free port> and runs
#      `st run http://127.0.0.1:PORT/openapi.json` with the API key (query
#      `api_key`) and the application key (bearer) given per security scheme;
#   5. stops the trigd it started (by its pid) and removes the temp dir.
#
# Checks: status_code_conformance, content_type_conformance,
# response_schema_conformance, and `not_a_server_error` narrowed to what the
# API documents as a run outcome: a 5xx passes only as 500 `run_failed` or
# 504 `run_timeout` (custom check in bench/schemathesis_hooks.py; the built-in
# one cannot look at the body's Code).
#
# Bounded: ST_MAX_EXAMPLES (default 30) cases per operation and phase,
# ST_MAX_TIME (default 180) seconds for the main run, plus 30 s for the one
# operation run last on its own (regenerating the application key).
# Exit status: that of `st run` (0 when every check passed).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MAX_EXAMPLES=${ST_MAX_EXAMPLES:-30}
MAX_TIME=${ST_MAX_TIME:-180}
VENV=${ST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/trigd-schemathesis-venv}

if [[ -z "${TRIGD_BIN:-}" ]]; then
    (cd "$ROOT" && cargo build --quiet)
    TRIGD_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/trigd
fi

if [[ ! -x "$VENV/bin/st" ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet 'schemathesis>=4.1,<5'
fi
echo "schemathesis: $("$VENV/bin/st" --version)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trigd-schemathesis.XXXXXX")
TRIGD_PID=
cleanup() {
    if [[ -n "$TRIGD_PID" ]] && kill -0 "$TRIGD_PID" 2>/dev/null; then
        kill -TERM "$TRIGD_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$TRIGD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$TRIGD_PID" 2>/dev/null || true
    fi
    if [[ -n "${ST_KEEP:-}" ]]; then
        echo "kept $WORK (config, trigd.log)"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT INT TERM

API_KEY="st-api-key-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
API_SHA=$(printf '%s' "$API_KEY" | sha256sum | cut -d' ' -f1)
PW_HASH=$(printf 'schemathesis-password\n' | "$TRIGD_BIN" hash-password)

mkdir -p "$WORK/programs"
cat >"$WORK/config.toml" <<EOF
[server]
state_dir = "state"
run_timeout = "5s"
kill_grace = "1s"
shutdown_grace = "2s"
max_concurrent_runs = 64
max_queued_runs = 10000
# Schemathesis sends wrong keys on purpose; with the default (30 failures a
# minute per address) every later request would get 429 for the minute.
auth_failures_per_minute = 0

[[api_keys]]
name = "schemathesis"
sha256 = "$API_SHA"

[[users]]
name = "alice"
password = "$PW_HASH"

[[workspaces]]
name = "ops"
members = ["alice"]

[[tools]]
name = "kit"
workspace = "ops"
[tools.environments.public]
public = true
vars = { ENV_NAME = "public" }
[tools.environments.private]
vars = { ENV_NAME = "private" }
[[tools.triggers]]
kind = "endpoint"
name = "echo"
method = "GET"
program = 1
function = "echo"
[[tools.triggers]]
kind = "endpoint"
name = "echo-post"
method = "POST"
program = 1
function = "echo"
[[tools.triggers]]
kind = "endpoint"
name = "echo-put"
method = "PUT"
program = 1
function = "echo"
[[tools.triggers]]
kind = "endpoint"
name = "echo-patch"
method = "PATCH"
program = 1
function = "echo"
[[tools.triggers]]
kind = "endpoint"
name = "echo-delete"
method = "DELETE"
program = 1
function = "echo"
[[tools.triggers]]
kind = "endpoint"
name = "fail"
method = "POST"
program = 2
function = "fail"
EOF

cat >"$WORK/programs/1-echo.toml" <<'EOF'
id = 1
name = "echo"
[[functions]]
name = "echo"
command = ["printf", "%s", "{name}"]
[functions.webhook]
outputs = ["name"]
EOF
cat >"$WORK/programs/2-fail.toml" <<'EOF'
id = 2
name = "fail"
[[functions]]
name = "fail"
steps = [{ shell = 'echo "failing on purpose" >&2; exit 3' }]
[functions.webhook]
EOF
cat >"$WORK/programs/3-two.toml" <<'EOF'
id = 3
name = "two"
[[functions]]
name = "first"
command = ["printf", "first %s %s", "{a}", "{b}"]
[functions.webhook]
outputs = ["a", "b"]
[[functions]]
name = "second"
steps = [{ shell = 'printf "{\"env\": \"%s\"}" "$a"' }]
[functions.webhook]
outputs = ["a"]
[[functions]]
name = "inactive"
command = ["true"]
[functions.webhook]
active = false
EOF
cat >"$WORK/programs/4-untriggered.toml" <<'EOF'
id = 4
name = "untriggered"
[[functions]]
name = "helper"
command = ["true"]
EOF
cat >"$WORK/programs/5-slow.toml" <<'EOF'
id = 5
name = "slow"
[[functions]]
name = "slow"
command = ["sleep", "10"]
timeout = "300ms"
[functions.webhook]
EOF

"$TRIGD_BIN" check --config "$WORK/config.toml"
APP_KEY=$("$TRIGD_BIN" app-key --config "$WORK/config.toml" --workspace ops --member alice 2>/dev/null)

# Start trigd on a free port; its first stdout line is `listening on http://ADDR`.
mkfifo "$WORK/stdout"
RUST_LOG=${RUST_LOG:-info} "$TRIGD_BIN" serve --config "$WORK/config.toml" --listen 127.0.0.1:0 \
    >"$WORK/stdout" 2>"$WORK/trigd.log" &
TRIGD_PID=$!
exec 3<"$WORK/stdout"
if ! read -r -t 15 LINE <&3; then
    echo "trigd did not start:" >&2
    cat "$WORK/trigd.log" >&2
    exit 1
fi
BASE=${LINE#listening on }
echo "trigd (pid $TRIGD_PID) at $BASE"

cat >"$WORK/schemathesis.toml" <<EOF
[generation]
max-examples = $MAX_EXAMPLES

# Names that exist in the temp config, drawn most of the time; the rest of
# the time Schemathesis generates its own (which must get documented 4xx).
[dictionaries.programs]
values = [1, 2, 3, 4, 5]
[dictionaries.tools]
values = ["kit"]
[dictionaries.envs]
values = ["public", "private"]
[dictionaries.workspaces]
values = ["ops"]
[dictionaries.triggers]
values = ["echo", "echo-post", "echo-put", "echo-patch", "echo-delete", "fail"]
[dictionaries.get-triggers]
values = ["echo"]
[dictionaries.post-triggers]
values = ["echo-post", "fail"]
[dictionaries.put-triggers]
values = ["echo-put"]
[dictionaries.patch-triggers]
values = ["echo-patch"]
[dictionaries.delete-triggers]
values = ["echo-delete"]

[parameters]
"query.program_id" = { dictionary = "programs", probability = 0.7 }
"path.tool" = { dictionary = "tools", probability = 0.8 }
"path.env" = { dictionary = "envs", probability = 0.8 }
"path.trigger" = { dictionary = "triggers", probability = 0.8 }
"path.ws" = { dictionary = "workspaces", probability = 0.8 }

[auth.openapi.api_key]
api_key = "$API_KEY"

[auth.openapi.bearer]
bearer = "$APP_KEY"
EOF
# On a tool endpoint, mostly a trigger of the operation's own method (else 405).
for m in Get Post Put Patch Delete; do
    cat >>"$WORK/schemathesis.toml" <<EOF

[[operations]]
include-operation-id = "callToolEndpoint$m"
parameters = { "path.trigger" = { dictionary = "${m,,}-triggers", probability = 0.8 } }
EOF
done

FILTER=()
if [[ -n "${ST_NO_BROWSER:-}" ]]; then
    FILTER=(--exclude-tag browser)
fi

st() {
    (
        cd "$WORK"
        SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH="$ROOT/bench" \
            "$VENV/bin/st" --config-file "$WORK/schemathesis.toml" run "$BASE/openapi.json" \
            --checks status_code_conformance,content_type_conformance,response_schema_conformance,run_outcomes_only_server_errors \
            --request-timeout 10 \
            --workers 1 \
            -H "User-Agent: schemathesis-trigd" \
            "$@"
    )
}
set +e
# Regenerating the application key (with that key as bearer) invalidates the
# key every other operation uses, so that operation runs last, on its own.
st --max-time "$MAX_TIME" --exclude-operation-id regenerateApplicationKey "${FILTER[@]}" "$@"
STATUS=$?
if [[ -z "${ST_NO_BROWSER:-}" ]]; then
    st --max-time 30 --phases examples,coverage,fuzzing --include-operation-id regenerateApplicationKey "$@"
    LAST=$?
    [[ $STATUS -ne 0 ]] || STATUS=$LAST
fi
set -e
# What the server answered, from its access log
# (`<ip> <METHOD> <target> <status> <ms>ms`), by method, path and status.
echo "--- trigd responses by operation and status ---"
awk '$4 == "access]" || / access\] / {
        for (i = 1; i <= NF; i++) if ($i ~ /^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS|TRACE)$/) break
        if (i > NF) next
        split($(i + 1), t, "?"); path = t[1]
        gsub(/\/api\/runs\/[^\/]+/, "/api/runs/{id}", path)
        sub(/^\/workspaces\/[^\/]+/, "/workspaces/{ws}", path)
        sub(/^\/static\/.*/, "/static/{file}", path)
        if (path ~ /^\/tools\//) {
            n = split(path, s, "/")
            path = (n == 4 && s[4] == "endpoints") ? "/tools/{tool}/endpoints" : "/tools/{tool}/{env}/{trigger}"
        }
        count[$i " " path " " $(i + 2)]++
    }
    END { for (k in count) print count[k], k }' "$WORK/trigd.log" | sort -k2,3 -k4n | awk '{ printf "%7d  %-7s %-32s %s\n", $1, $2, $3, $4 }'
if [[ $STATUS -ne 0 ]]; then
    echo "--- trigd log (tail) ---"
    tail -n 40 "$WORK/trigd.log"
fi
exit $STATUS
