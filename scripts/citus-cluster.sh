#!/usr/bin/env bash
# A Citus cluster on loopback, for the Citus tests and benchmarks and for
# people: a coordinator and workers (PostgreSQL 15 with Citus 13.2.2), each
# with a database `onejob` that has the `citus` extension, the workers
# added to the coordinator's metadata.
#
#   scripts/citus-cluster.sh start DIR [WORKERS]   # a new cluster (2 workers by default); prints its env lines
#   scripts/citus-cluster.sh stop DIR              # every node it started, gone (idempotent)
#   scripts/citus-cluster.sh env DIR               # KEY=VALUE lines: URLs and ports
#
#   BASE_PORT=27500 (default)  the coordinator listens on 127.0.0.1:BASE_PORT,
#                              worker N on BASE_PORT + N (read by `start` only)
#   CITUS_PACKAGE              the built package to install when Citus is
#                              missing (default: ../shared/citus's tarball
#                              beside the repository, else
#                              /work/shared/citus's); installing needs root
#
# `env` prints COORDINATOR_URL (what onejob's DATABASE_URL names),
# WORKER1_URL, WORKER2_URL, ... and COORDINATOR_PORT, WORKER1_PORT, ...: every
# URL is the superuser `postgres` (trust authentication, loopback only) on
# the database `onejob`. `start` prints the same lines once every node is
# up; progress goes to standard error.
#
# `start` makes a new cluster every time: it first stops whatever a previous
# start left running in DIR and removes the nodes' files there. `stop` stops
# each node in immediate mode (no checkpoint). DIR keeps each node's log
# (coordinator.log, worker1.log, ...). When run as root, Postgres runs as the
# postgres user (DIR and its parents must let that user through).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
command=${1:-}
dir=${2:-}
[ -n "$command" ] && [ -n "$dir" ] || { sed -n '2,17p' "$0" >&2; exit 2; }
PGBIN=/usr/lib/postgresql/15/bin
PACKAGE_NAME=citus-13.2.2-pg15-debian12-amd64.tar.xz
if [ -z "${CITUS_PACKAGE:-}" ]; then
    CITUS_PACKAGE=$here/../../shared/citus/$PACKAGE_NAME
    [ -f "$CITUS_PACKAGE" ] || CITUS_PACKAGE=/work/shared/citus/$PACKAGE_NAME
fi

log() { printf '== %s\n' "$*" >&2; }

as_postgres() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

nodes() {
    local node
    for node in "$dir"/coordinator "$dir"/worker*; do
        [ -d "$node/data" ] && basename "$node"
    done
    return 0
}

stop_cluster() {
    local node
    for node in $(nodes); do
        as_postgres "$PGBIN/pg_ctl" -D "$dir/$node/data" -m immediate stop >/dev/null 2>&1 || true
    done
}

install_citus() {
    [ -f "$PGBIN/../lib/citus.so" ] && return 0
    [ "$(id -u)" = 0 ] || { echo "Citus is not installed and installing it needs root: tar -C / -xJf $CITUS_PACKAGE" >&2; exit 1; }
    [ -f "$CITUS_PACKAGE" ] || { echo "no Citus package at $CITUS_PACKAGE (set CITUS_PACKAGE)" >&2; exit 1; }
    log "installing Citus from $CITUS_PACKAGE"
    tar -C / -xJf "$CITUS_PACKAGE"
}

sql() {
    local port=$1 database=$2 statement=$3
    as_postgres "$PGBIN/psql" -qAt -h 127.0.0.1 -p "$port" -U postgres -d "$database" -v ON_ERROR_STOP=1 -c "$statement"
}

start_node() {
    local name=$1 port=$2
    mkdir -p "$dir/$name"
    : > "$dir/$name.log"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir/$name" "$dir/$name.log"
    as_postgres "$PGBIN/initdb" -D "$dir/$name/data" -A trust -U postgres >/dev/null
    if ! as_postgres "$PGBIN/pg_ctl" -D "$dir/$name/data" -l "$dir/$name.log" -w -t 60 start \
        -o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c shared_preload_libraries=citus,pg_stat_statements -c pg_stat_statements.max=50000 -c max_connections=300 -c max_worker_processes=64 -c wal_level=logical -c fsync=off" \
        >/dev/null; then
        tail -n 20 "$dir/$name.log" >&2
        return 1
    fi
    sql "$port" postgres "create database onejob" >/dev/null
    sql "$port" onejob "create extension citus" >/dev/null
}

print_env() {
    cat "$dir/cluster.env"
}

case "$command" in
start)
    workers=${3:-2}
    base=${BASE_PORT:-27500}
    install_citus
    mkdir -p "$dir"
    stop_cluster
    rm -rf "$dir"/coordinator "$dir"/worker* "$dir/cluster.env"
    [ "$(id -u)" = 0 ] && chmod o+x "$dir"
    log "starting a coordinator on $base and $workers worker(s) in $dir"
    trap 'stop_cluster' ERR
    start_node coordinator "$base"
    sql "$base" onejob "select citus_set_coordinator_host('127.0.0.1', $base)" >/dev/null
    {
        echo "COORDINATOR_PORT=$base"
        echo "COORDINATOR_URL=postgres://postgres@127.0.0.1:$base/onejob"
    } > "$dir/cluster.env"
    for n in $(seq 1 "$workers"); do
        port=$((base + n))
        start_node "worker$n" "$port"
        sql "$base" onejob "select citus_add_node('127.0.0.1', $port)" >/dev/null
        {
            echo "WORKER${n}_PORT=$port"
            echo "WORKER${n}_URL=postgres://postgres@127.0.0.1:$port/onejob"
        } >> "$dir/cluster.env"
    done
    trap - ERR
    active=$(sql "$base" onejob "select count(*) from citus_get_active_worker_nodes()")
    [ "$active" = "$workers" ] || { echo "the coordinator sees $active active worker(s), not $workers" >&2; stop_cluster; exit 1; }
    log "up: $workers worker(s) active"
    print_env
    ;;
stop)
    stop_cluster
    ;;
env)
    print_env
    ;;
*)
    sed -n '2,17p' "$0" >&2
    exit 2
    ;;
esac
