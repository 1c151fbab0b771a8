# bench/pg.sh — the PostgreSQL cases of bench/run.sh (case name `pg`:
# BENCH_ONLY=pg bench/run.sh [--quick]), sourced by bench/run.sh.
#
#   pg_case    PostgreSQL from Debian's binaries started in $WORK/pg (initdb
#              and pg_ctl as nobody when root, fsync on, a free port on
#              127.0.0.1), then, interleaved over $ROUNDS rounds:
#              sync /bin/true (8 conns, $SECS s) and async accepts (32 conns,
#              $ASYNC_SECS s) on trigd with `[state] url` against trigd on
#              its state dir (the embedded backend), database round trips
#              per sync run from /metrics; then 1, 2 and 3 instances on the
#              database behind HAProxy (dist/haproxy.cfg as shipped), sync
#              /bin/true with 16 conns, all on this one machine.
#   pg_rows    the table rows (the "webhook" column holds the embedded
#              backend's figure).
#   pg_cleanup stop the PostgreSQL server (from run.sh's cleanup).
#
# Uses run.sh's helpers: run_wrk, start_trigd, stop_pid, forget_pid, add,
# med, log, snooze, port_open, http_status, trigd_drain, and TD, KEY,
# T_TRUE, T_ASYNC.

PG_DATA="" PG_BIN="" PG_PORT="" PG_SOCK=""

pg_bindir() {
    local d
    d=$(pg_config --bindir 2>/dev/null) && [[ -x $d/initdb ]] && { echo "$d"; return; }
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [[ -x $d/initdb ]] && { echo "$d"; return; }
    done
    return 1
}

as_pg() { if [[ $(id -u) -eq 0 ]]; then runuser -u nobody -- "$@"; else "$@"; fi; }

pg_free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        port_open "$p" || { echo "$p"; return; }
    done
}

pg_psql() { "$PG_BIN/psql" -X -q -A -t -h "$PG_SOCK" -p "$PG_PORT" -U trigd -d "$1" -c "$2"; }

pg_start() {
    PG_BIN=$(pg_bindir) || { CASE_ERRORS+=("pg: no PostgreSQL server binaries (apt-get install postgresql)"); return 1; }
    local root=$WORK/pg
    mkdir -p "$root"
    chmod 755 "$WORK" "$root"
    PG_DATA=$root/data PG_SOCK=$root PG_PORT=$(pg_free_port)
    printf '%s\n' "bench-db-pw" >"$root/pw"
    [[ $(id -u) -eq 0 ]] && chown -R nobody: "$root"
    as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U trigd --pwfile "$root/pw" --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 --locale=C >"$WORK/pg-initdb.log" 2>&1 ||
        { CASE_ERRORS+=("pg: initdb failed: $(tail -3 "$WORK/pg-initdb.log")"); PG_DATA=""; return 1; }
    printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\nmax_connections = 200\nfsync = on\n" \
        "$PG_PORT" "$root" | as_pg tee -a "$PG_DATA/postgresql.conf" >/dev/null
    as_pg "$PG_BIN/pg_ctl" start -w -t 60 -D "$PG_DATA" -l "$root/server.log" >/dev/null ||
        { CASE_ERRORS+=("pg: pg_ctl start failed: $(tail -3 "$root/server.log")"); PG_DATA=""; return 1; }
    log "case pg: $("$PG_BIN/postgres" --version) on 127.0.0.1:$PG_PORT (fsync on)"
}

pg_cleanup() {
    [[ -n $PG_DATA && -d $PG_DATA ]] || return 0
    as_pg "$PG_BIN/pg_ctl" stop -w -m fast -D "$PG_DATA" >/dev/null 2>&1 || true
    PG_DATA=""
}

# pg_trigd_dir NAME DB [INSTANCE] -> a copy of $TD at $WORK/pg-NAME, on
# database DB when DB is not empty.
pg_trigd_dir() {
    local dir=$WORK/pg-$1
    rm -rf "$dir"
    mkdir -p "$dir"
    cp -r "$TD/config.toml" "$TD/programs" "$dir/"
    if [[ -n ${3:-} ]]; then
        sed -i "s/^\[server\]$/[server]\ninstance = \"$3\"\ntrusted_proxies = [\"127.0.0.1\"]/" "$dir/config.toml"
    fi
    if [[ -n $2 ]]; then
        pg_psql postgres "CREATE DATABASE $2" >/dev/null 2>&1 || true
        printf 'bench-db-pw\n' >"$dir/db-password"
        printf '\n[state]\nurl = "postgres://trigd@127.0.0.1:%s/%s?sslmode=disable"\npassword_file = "%s"\n' \
            "$PG_PORT" "$2" "$dir/db-password" >>"$dir/config.toml"
    fi
    echo "$dir"
}

# pg_drain SIDE PORT ROUND: wait (at most 300 s) until the trigd on PORT has
# no run queued or running (trigd_drain), so that the next sync round does
# not wait behind the async round's backlog; past the bound the round is
# logged and marked (pg.drain_timeouts: the sync rows then say "invalid").
pg_drain() {
    if trigd_drain "$2" 300; then
        log "  pg $1 r$3: drained in ${DRAIN_S}s"
    else
        log "  pg $1 r$3: runs still queued or running after ${DRAIN_S}s: the next round is not clean"
        add "pg.$1.note" "r$3:not-drained-after-${DRAIN_S}s"
        add pg.drain_timeouts 1
    fi
}

# pg_sync_bad: whether the last run_wrk of a sync round measured garbage
# (no 200 at all, another status, socket errors).
pg_sync_bad() { [[ $WR_OTHER != - || $WR_ERRS != 0 || $WR_OK == 0 ]]; }

pg_case() {
    pg_start || return 0
    local emb pgd e_pid e_port p_pid p_port r side port rt0 rt1
    emb=$(pg_trigd_dir embedded "")
    pgd=$(pg_trigd_dir db bench_single)
    start_trigd "$emb"; e_pid=$T_PID e_port=$T_PORT
    start_trigd "$pgd"; p_pid=$T_PID p_port=$T_PORT
    log "case pg: embedded pid $e_pid, PostgreSQL pid $p_pid; sync 8 conns ${SECS}s, async 32 conns ${ASYNC_SECS}s, $ROUNDS rounds"
    for ((r = 1; r <= ROUNDS; r++)); do
        for side in embedded db; do
            if [[ $side == embedded ]]; then port=$e_port; else port=$p_port; fi
            rt0=$(trigd_metric "$port" trigd_state_db_round_trips_total)
            run_wrk "$WORK/wrk/pg-sync-$side-$r.txt" 8 "$SECS" "http://127.0.0.1:$port$T_TRUE" 200
            rt1=$(trigd_metric "$port" trigd_state_db_round_trips_total)
            add "pg.sync.$side" "$WR_RPS"
            add "pg.sync.$side.p99" "$WR_P99"
            if pg_sync_bad; then
                add "pg.$side.note" "r$r:sync:ok=$WR_OK,other=$WR_OTHER,sockerr=$WR_ERRS"
                add pg.sync_bad 1
            fi
            [[ $side == db ]] && add pg.rt_per_run "$(awk -v a="$rt0" -v b="$rt1" -v n="$WR_TOTAL" \
                'BEGIN { if (a == "nan" || b == "nan" || n == 0) print "nan"; else printf "%.2f", (b - a) / n }')"
            log "  pg $side r$r: sync $WR_RPS/s"
        done
        for side in embedded db; do
            if [[ $side == embedded ]]; then port=$e_port; else port=$p_port; fi
            run_wrk "$WORK/wrk/pg-async-$side-$r.txt" 32 "$ASYNC_SECS" "http://127.0.0.1:$port$T_ASYNC" 200
            add "pg.async.$side" "$(calc "$WR_OK / $ASYNC_SECS")"
            add "pg.async.$side.refused" "$WR_503"
            [[ $WR_OTHER == - && $WR_ERRS == 0 ]] || add "pg.$side.note" "r$r:async:other=$WR_OTHER,sockerr=$WR_ERRS"
            log "  pg $side r$r: async accepted $WR_OK in ${ASYNC_SECS}s (503: $WR_503)"
            pg_drain "$side" "$port" "$r"
        done
    done
    stop_pid "$e_pid"; forget_pid "$e_pid"
    stop_pid "$p_pid"; forget_pid "$p_pid"
    pg_cluster_case
}

# 1, 2 and 3 instances on one database behind HAProxy (dist/haproxy.cfg).
pg_cluster_case() {
    local hx n i cfg lb hpid dir servers pids=() ports=()
    hx=$(command -v haproxy || echo /usr/sbin/haproxy)
    [[ -x $hx ]] || { CASE_ERRORS+=("pg: haproxy not installed (apt-get install haproxy)"); return 0; }
    for i in 1 2 3; do
        dir=$(pg_trigd_dir "c$i" bench_cluster "c$i")
        start_trigd "$dir"
        pids+=("$T_PID") ports+=("$T_PORT")
    done
    for n in 1 2 3; do
        lb=$(pg_free_port)
        cfg=$WORK/pg-haproxy-$n.cfg
        servers=""
        for ((i = 0; i < n; i++)); do servers+="    server c$((i + 1)) 127.0.0.1:${ports[$i]}"$'\n'; done
        sed -e "s#/run/haproxy/trigd.sock#$WORK/pg-hx-$n.sock#" -e "s#^    bind :80\$#    bind 127.0.0.1:$lb#" \
            -e '/^    server web[123] /d' -e 's#^    log stdout.*#    log stderr format raw local0 warning#' \
            "$ROOT/dist/haproxy.cfg" >"$cfg"
        printf '%s' "$servers" >>"$cfg"
        "$hx" -db -f "$cfg" >/dev/null 2>"$WORK/pg-haproxy-$n.log" &
        hpid=$!
        PIDS+=("$hpid")
        for ((i = 0; i < 100; i++)); do
            http_status GET "$lb" /healthz
            [[ $HTTP_STATUS == 200 ]] && break
            snooze 0.1
        done
        snooze 3 # every server through `rise 2` (inter 2s fastinter 500ms)
        for ((r = 1; r <= ROUNDS; r++)); do
            run_wrk "$WORK/wrk/pg-cluster-$n-$r.txt" 16 "$SECS" "http://127.0.0.1:$lb$T_TRUE" 200
            add "pg.cluster.$n" "$WR_RPS"
            pg_sync_bad && add "pg.cluster$n.note" "r$r:ok=$WR_OK,other=$WR_OTHER,sockerr=$WR_ERRS"
        done
        log "  pg: $n instance(s) behind HAProxy: $(med "pg.cluster.$n") sync runs/s"
        stop_pid "$hpid"; forget_pid "$hpid"
    done
    for i in "${pids[@]}"; do stop_pid "$i"; forget_pid "$i"; done
}

pg_rows() {
    local L t e q bad
    L="PostgreSQL backend (webhook column: the embedded backend), sync /bin/true, 8 conns"
    t=$(tm pg.sync.db); e=$(tm pg.sync.embedded); q=$(ratio "$t" "$e")
    verdict "$(passif ge "$q" 0.7)"
    # A round with non-200 answers, socket errors or no answer at all, or
    # one started on a backlog the drain's bound left, measured something
    # else: the row says so instead of pass/short.
    local marks=(${S[pg.sync_bad]:-} ${S[pg.drain_timeouts]:-})
    bad=${#marks[@]}
    if ((bad > 0)); then
        V="invalid ($bad bad round(s), see notes)"
        VERDICTS[-1]=short
    fi
    row "$L" "req/s" "$(fmt "$t" %.0f)" "$(fmt "$e" %.0f)" "$(fmt "$q" %.2f×)" "≥ 0.70× embedded" "$V"
    row "$L" "p99 ms" "$(fmt "$(tm pg.sync.db.p99)" %.2f)" "$(fmt "$(tm pg.sync.embedded.p99)" %.2f)" "" "" ""
    t=$(tm pg.rt_per_run)
    # 0 would mean the runs never reached the database: short too.
    verdict "$(passif eval 'le "$t" 3 && lt 0 "$t"')"
    row "$L" "database round trips per run (/metrics)" "$(fmt "$t" %.2f)" "" "" "> 0 and ≤ 3" "$V"
    L="PostgreSQL backend (webhook column: the embedded backend), async accept, 32 conns ${ASYNC_SECS}s"
    t=$(tm pg.async.db); e=$(tm pg.async.embedded); q=$(ratio "$t" "$e")
    verdict "$(passif ge "$q" 1.0)"
    row "$L" "accepted (200)/s" "$(fmt "$t" %.0f)" "$(fmt "$e" %.0f)" "$(fmt "$q" %.2f×)" "≥ 1.00× embedded" "$V"
    row "$L" "refused (503, worst round)" "$(fmt "$(printf '%s\n' ${S[pg.async.db.refused]:-} | sort -g | tail -1)" %.0f)" \
        "$(fmt "$(printf '%s\n' ${S[pg.async.embedded.refused]:-} | sort -g | tail -1)" %.0f)" "" "" ""
    for n in 1 2 3; do
        row "PostgreSQL backend: $n instance(s) behind HAProxy on this one machine (instances, HAProxy, PostgreSQL and wrk share its cores)" \
            "sync /bin/true req/s, 16 conns" "$(fmt "$(tm "pg.cluster.$n")" %.0f)" "" \
            "$(fmt "$(ratio "$(tm "pg.cluster.$n")" "$(tm pg.cluster.1)")" %.2f×)" "" ""
    done
}
