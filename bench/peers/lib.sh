# shellcheck shell=bash disable=SC2034
# Shared by bench/peers/install and the harnesses bench/peers/*/run. Source it.
# Everything a harness starts is recorded by PID and stopped by PID when it exits.

PEERS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
source "$PEERS_DIR/../../scripts/lib.sh"

PEERS_HOME="$CADENZA_HOME/bench-peers"
QUARTZ_LIB="$PEERS_HOME/quartz/lib"
BULLMQ_HOME="$PEERS_HOME/bullmq"
REDIS_ROOT="$PEERS_HOME/redis"

# Measurement timing shared by every harness (milliseconds).
WARMUP_MS=10000 # from the first due time to the start of the window (JIT, pools, caches)
GRACE_MS=5000  # after the window, before the load is stopped: runs due in the window may finish

redis_server() {
    LD_LIBRARY_PATH="$REDIS_ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$REDIS_ROOT/usr/bin/redis-server" "$@"
}
redis_ok() { [[ -x "$REDIS_ROOT/usr/bin/redis-server" ]] && redis_server --version >/dev/null 2>&1; }

now_ms() { date +%s%3N; }

# sleep_until EPOCH_MS
sleep_until() {
    local left=$(($1 - $(now_ms)))
    if ((left > 0)); then sleep "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))"; fi
}

# Parses the options every harness takes: --jobs N (one number), --secs S.
parse_harness_args() {
    JOBS=2000
    SECS=30
    while (($#)); do
        case "$1" in
        --jobs) JOBS="${2:?--jobs needs a value}"; shift 2 ;;
        --secs) SECS="${2:?--secs needs a value}"; shift 2 ;;
        -h | --help)
            echo "usage: $0 [--jobs N (2000)] [--secs S (30)]; prints one JSON line last"
            exit 0
            ;;
        *) die "unknown argument $1" ;;
        esac
    done
    [[ "$JOBS" =~ ^[0-9]+$ && "$JOBS" -ge 1 ]] || die "--jobs: a positive number"
    [[ "$SECS" =~ ^[0-9]+$ && "$SECS" -ge 5 ]] || die "--secs: at least 5"
}

# --- processes started by this harness -------------------------------------------------------
# "pid name signal" per line; stopped in reverse order on exit.
STARTED=()
started() { STARTED+=("$1 $2 ${3:-TERM}"); }
stop_started() {
    local i pid name sig
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
        read -r pid name sig <<<"${STARTED[$i]}"
        stop_pid "$pid" "$sig" 20 "$name" || true
    done
    STARTED=()
}

# A scratch directory for one run, removed on exit with everything in it (the PostgreSQL data
# directory lives elsewhere when root, where the postgres user can reach it: pg_data_dir_for).
RUN_DIR=""
PG_REAL_DIR=""
make_run_dir() {
    mkdir -p "$PEERS_HOME/runs"
    RUN_DIR="$(mktemp -d "$PEERS_HOME/runs/$1.XXXXXX")"
}
cleanup_run() {
    stop_started
    if [[ -n "$PG_REAL_DIR" && "$PG_REAL_DIR" == /var/tmp/cadenza-pg-* ]]; then rm -rf "$PG_REAL_DIR"; fi
    if [[ -n "$RUN_DIR" && -z "${KEEP_RUN_DIR:-}" ]]; then rm -rf "$RUN_DIR"; fi
}

# bench_pg_start: a private PostgreSQL on a free loopback port with the settings of Cadenza's
# own benchmark (integration/src/postgres.rs with CADENZA_PG_BENCH): fsync, synchronous_commit
# and full_page_writes off, max_connections 200, shared_buffers 512MB, checkpoints at most every
# 15 minutes or 8 GB. Sets PG_PORT, PG_PID, PG_BIN.
bench_pg_start() {
    PG_BIN="$(pg_bin_dir)" || die "PostgreSQL server binaries not found; run scripts/install-deps"
    PG_REAL_DIR="$(pg_data_dir_for "$RUN_DIR/pg")"
    as_pg_user "$PG_BIN/initdb" -D "$PG_REAL_DIR" -U postgres -A trust -E UTF8 --locale=C -N \
        >"$RUN_DIR/pg.initdb.log" 2>&1 || {
        cat "$RUN_DIR/pg.initdb.log" >&2
        die "initdb failed"
    }
    cat >>"$PG_REAL_DIR/postgresql.conf" <<'EOF'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
shared_buffers = 512MB
max_wal_size = 8GB
checkpoint_timeout = 15min
EOF
    PG_PORT="$(free_port)"
    PG_PID="$(pg_start_server "$PG_REAL_DIR" "$PG_PORT" "$RUN_DIR/pg.log")"
    # SIGINT: PostgreSQL's fast shutdown.
    started "$PG_PID" postgres INT
}

bench_psql() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres "$@"; }

# bench_redis_start: a private Redis on a free loopback port, no persistence. Sets REDIS_PORT,
# REDIS_PID.
bench_redis_start() {
    redis_ok || die "Redis is not installed; run bench/peers/install"
    REDIS_PORT="$(free_port)"
    setsid env LD_LIBRARY_PATH="$REDIS_ROOT/usr/lib/x86_64-linux-gnu" \
        "$REDIS_ROOT/usr/bin/redis-server" --bind 127.0.0.1 --port "$REDIS_PORT" \
        --save '' --appendonly no --dir "$RUN_DIR" --protected-mode yes \
        >"$RUN_DIR/redis.log" 2>&1 </dev/null &
    REDIS_PID=$!
    started "$REDIS_PID" redis-server INT
    wait_port "$REDIS_PORT" 15 "$REDIS_PID" || {
        tail -n 20 "$RUN_DIR/redis.log" >&2
        die "redis-server did not start (log: $RUN_DIR/redis.log)"
    }
}

# wait_pids SECONDS PID...: waits for the processes (children of this shell) to exit; after
# SECONDS, stops those still running (SIGTERM, then SIGKILL) and fails.
wait_pids() {
    local secs="$1" pid i ok=0
    shift
    for ((i = 0; i < secs * 10; i++)); do
        ok=1
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && ok=0; done
        ((ok)) && break
        sleep 0.1
    done
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then
            say "pid $pid still running after ${secs}s; stopping it"
            stop_pid "$pid" TERM 10 || true
            ok=0
        fi
        wait "$pid" 2>/dev/null || true
    done
    ((ok))
}
