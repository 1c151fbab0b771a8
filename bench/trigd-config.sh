# bench/trigd-config.sh — the trigd configuration bench/run.sh measures,
# sourced by bench/run.sh.
#
#   trigd_base_config KEY_SHA256 MAX_RUNS
#       print the [server] settings and the API key (MAX_RUNS empty:
#       max_concurrent_runs left to trigd's default)
#   write_trigd_config DIR KEY_SHA256 MAX_RUNS SECRET_FILE ASYNC_OUT ONCE_OUT
#       write DIR/config.toml (the base, one tool with a signed GitHub
#       endpoint verified with SECRET_FILE), DIR/programs/ (ids 1-5: true,
#       echo, async, github, once) and the two scripts that append a line
#       to ASYNC_OUT and ONCE_OUT

trigd_base_config() {
    cat <<EOF
[server]
listen = "127.0.0.1:0"
workers = 8
${2:+max_concurrent_runs = $2}
shutdown_grace = "2s"
# The peer has no failed-authentication limit: the rejected case would
# otherwise turn every later request from 127.0.0.1 into 429.
auth_failures_per_minute = 0

[[api_keys]]
name = "bench"
sha256 = "$1"
EOF
}

write_trigd_config() {
    local dir=$1 sha=$2 max_runs=$3 secret_file=$4 async_out=$5 once_out=$6
    mkdir -p "$dir/programs"
    {
        trigd_base_config "$sha" "$max_runs"
        cat <<EOF

[[workspaces]]
name = "bench"

[[tools]]
name = "bench"
workspace = "bench"
[tools.environments.prod]
public = true

[[tools.triggers]]
kind = "endpoint"
name = "github"
program = 4
function = "run"
verify = { scheme = "hmac-sha256", header = "X-Hub-Signature-256", prefix = "sha256=", secret_file = "$secret_file" }
rule = { header = "X-GitHub-Event", equals = "push" }
EOF
    } >"$dir/config.toml"
    bench_program "$dir" 1 true '["/bin/true"]' '[functions.webhook]'
    bench_program "$dir" 2 echo '["/bin/echo", "{a}", "{b}"]' '[functions.webhook]' 'outputs = ["a", "b"]'
    bench_program "$dir" 3 async "[\"$dir/append.sh\"]" '[functions.webhook]'
    bench_program "$dir" 4 github '["/bin/true"]' 'webhook = { active = false }'
    bench_program "$dir" 5 once "[\"$dir/once.sh\"]" '[functions.webhook]'
    printf '#!/bin/sh\necho run >> %s\n' "$async_out" >"$dir/append.sh"
    printf '#!/bin/sh\necho run >> %s\n' "$once_out" >"$dir/once.sh"
    chmod +x "$dir/append.sh" "$dir/once.sh"
}

# bench_program DIR ID NAME COMMAND [LINES...]: DIR/programs/NAME.toml, one
# function "run" running COMMAND (a TOML array), then LINES.
bench_program() {
    local file=$1/programs/$3.toml
    printf 'id = %s\nname = "%s"\n\n[[functions]]\nname = "run"\ncommand = %s\n' "$2" "$3" "$4" >"$file"
    shift 4
    printf '%s\n' "$@" >>"$file"
}
