#!/usr/bin/env bash
# A small highly available Postgres on loopback, for the failover tests and
# for people: two Postgres 15 nodes (node1, node2) managed by Patroni, a
# one-member etcd as Patroni's store, and HAProxy in front sending
# connections to whichever node is the primary.
#
#   scripts/ha-cluster.sh start DIR [--async]   # a new cluster; returns once it is healthy
#   scripts/ha-cluster.sh stop DIR              # everything it started, gone (idempotent)
#   scripts/ha-cluster.sh env DIR               # KEY=VALUE lines: URLs and ports
#   scripts/ha-cluster.sh leader DIR            # the primary's name: node1 or node2
#   scripts/ha-cluster.sh kill-leader DIR       # SIGKILL the primary's Patroni and Postgres; prints its name
#   scripts/ha-cluster.sh restart-node DIR NAME # start a killed node again; returns once it streams
#   scripts/ha-cluster.sh switchover DIR [NAME] # planned switchover to NAME (default: the other node)
#
#   BASE_PORT=27400 (default)  the first of seven ports on 127.0.0.1, read by
#                              `start` only (the others read DIR/cluster.env):
#                              +0 etcd clients, +1 etcd peers, +2 and +3
#                              Postgres on node1 and node2, +4 and +5 their
#                              Patroni REST APIs, +6 HAProxy. Clusters with
#                              different DIR and BASE_PORT run side by side.
#   HA_WAIT=90 (default)       seconds `start`, `restart-node`, `switchover`
#                              (and `leader`, `kill-leader`, for a primary to
#                              exist) wait before they give up.
#
# `env` prints lines a shell can source (`set -a; . <(scripts/ha-cluster.sh
# env DIR); set +a`) and a program can split on the first `=`: HA_URL (through
# HAProxy: always the primary), NODE1_URL and NODE2_URL (each node directly),
# MULTI_URL (both nodes, libpq's target_session_attrs=read-write picks the
# primary), HA_SUPERUSER_URL (postgres through HAProxy), the ports HA_PORT,
# NODE1_PORT, NODE2_PORT, NODE1_REST_PORT, NODE2_REST_PORT, ETCD_PORT,
# ETCD_PEER_PORT, and HA_MODE (sync or async). The URLs name the database
# `onejob`, owned by the user `onejob` (password `onejob`); the superuser is
# `postgres` (password `postgres`), replication uses `replicator`
# (`replicator`). `start` prints the same lines when the cluster is up;
# progress goes to standard error.
#
# Synchronous mode (the default): Patroni keeps the replica as the
# synchronous standby, so a commit acknowledged by the primary is on both
# nodes and a failover loses nothing. When the replica is gone the primary
# goes on alone rather than blocking writes (synchronous_mode_strict off).
# --async leaves replication asynchronous.
#
# Failover: a primary that stops renewing its leader key (ttl 10 s) is
# replaced by the replica within about ttl + loop_wait seconds; HAProxy
# checks each node's Patroni (/primary) every second and closes the
# connections to a node marked down, so clients reconnect to the new
# primary. A node started again after a crash rejoins as a replica, rewound
# with pg_rewind when its timeline diverged.
#
# `start` makes a new cluster every time: it first stops whatever a previous
# start left running in DIR, then removes the files it made there (it
# removes nothing else in DIR). So `stop` does not shut down cleanly: it
# kills Patroni, stops Postgres in immediate mode (no checkpoint), then
# etcd and HAProxy, and kills whatever is left; it takes well under a
# second. DIR keeps the logs: etcd.log, haproxy.log, node1.log and
# node2.log (Patroni's and Postgres's output). When `start` fails it prints
# the last lines of the logs and stops the cluster.
#
# Postgres refuses to run as root, so when run as root Postgres and Patroni
# run as the postgres user (DIR and its parents must let that user through);
# etcd and HAProxy stay root's. Needs the Debian packages postgresql-15,
# patroni, python3-etcd, etcd-server and haproxy; it downloads nothing.

set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
SCOPE=onejob-ha
NAMESPACE=/service/
WAIT=${HA_WAIT:-90}
NODES=(node1 node2)
# Patroni's own interpreter; the first python3 on PATH may be a different one.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'ha-cluster: %s\n' "$*" >&2; exit 1; }

usage() {
    echo "usage (see the comment at the top of $0):" >&2
    sed -n 's/^#   \(scripts\/ha-cluster.sh .*\)/  \1/p' "$0" >&2
    exit 2
}

# Postgres and Patroni run as the postgres user when this runs as root. A
# clean environment: the caller's PATH (a Python of its own) or PG*
# variables must not change what Patroni or Postgres do.
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$DIR" \
            setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
    else
        env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$DIR" "$@"
    fi
}

# HTTP with curl, or with Python where curl is missing.
if command -v curl >/dev/null 2>&1; then
    http_code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null || true; }
    http_get() { curl -sf -m 2 "$1" 2>/dev/null; }
    http_post() { curl -sf -m 2 -H 'Content-Type: application/json' -d "$2" "$1" 2>/dev/null; }
else
    http_code() {
        "$PY" - "$1" <<'PY' 2>/dev/null || echo 000
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
PY
    }
    http_get() {
        "$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' "$1" 2>/dev/null
    }
    http_post() {
        "$PY" -c 'import sys, urllib.request
r = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={"Content-Type": "application/json"})
sys.stdout.write(urllib.request.urlopen(r, timeout=2).read().decode())' "$1" "$2" 2>/dev/null
    }
fi

# The command line of a process, spaces for NULs; empty when it is gone.
cmdline() { tr '\0' ' ' 2>/dev/null < "/proc/$1/cmdline" || true; }

# Processes one of whose arguments is exactly ARG and whose command line
# also contains PROGRAM (an editor open on a config file is not a daemon).
pids_with_arg() {
    local arg=$1 program=$2 f pid
    for f in $(grep -zlxsF -- "$arg" /proc/[0-9]*/cmdline); do
        pid=${f#/proc/}; pid=${pid%/cmdline}
        [ "$pid" = $$ ] && continue
        case "$(cmdline "$pid")" in *"$program"*) echo "$pid" ;; esac
    done
    return 0
}

# Every Postgres process of a node: they all work in its data directory,
# and the backends are each in a session of their own, so neither the
# postmaster's process group nor its list of children would catch them all.
pg_pids() {
    local pattern f pid
    pattern=$(printf '%s' "$DIR/$1/data" | sed 's/[][*?\\]/\\&/g')
    for f in $(find /proc/[0-9]*/cwd -maxdepth 0 -lname "$pattern" 2>/dev/null); do
        pid=${f#/proc/}; echo "${pid%/cwd}"
    done
    return 0
}

# A daemon in a session (and process group) of its own, detached from the
# caller's terminal and output: a test harness reading this script's output
# must not wait for the daemons to end. Its pid goes to PIDFILE.
spawn() {
    local pidfile=$1 logfile=$2
    shift 2
    rm -f "$pidfile"
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$@" </dev/null >>"$logfile" 2>&1 &
    # Not this shell's job: killing it later must not be reported here.
    disown $!
    local i
    for i in $(seq 50); do
        [ -s "$pidfile" ] && return 0
        sleep 0.05
    done
    die "could not start $*"
}

# The live processes of a daemon this script started in DIR (node1, node2,
# etcd or haproxy): the one its pid file names, and any other a lost pid
# file would hide, found by the file or directory only it is given.
daemon_pids() {
    case "$1" in
        node1|node2) pids_with_arg "$DIR/$1/patroni.yml" /usr/bin/patroni ;;
        etcd) pids_with_arg "$DIR/etcd" etcd ;;
        haproxy) pids_with_arg "$DIR/haproxy.cfg" haproxy ;;
    esac
}

# SIGKILL a daemon; a process group of its own (see spawn) goes whole.
kill_daemon() {
    local name=$1 pid leader
    leader=$(cat "$DIR/$name.pid" 2>/dev/null || true)
    for pid in $(daemon_pids "$name"); do
        if [ "$pid" = "$leader" ]; then
            kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
        else
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    rm -f "$DIR/$name.pid"
}

load_env() {
    [ -n "$DIR" ] || usage
    [ -d "$DIR" ] || die "no directory $DIR"
    DIR=$(cd "$DIR" && pwd -P)
    [ -f "$DIR/cluster.env" ] || die "no cluster in $DIR (no cluster.env: run start first)"
    # shellcheck disable=SC1091
    . "$DIR/cluster.env"
}

rest_port() { if [ "$1" = node1 ]; then echo "$NODE1_REST_PORT"; else echo "$NODE2_REST_PORT"; fi; }
pg_port() { if [ "$1" = node1 ]; then echo "$NODE1_PORT"; else echo "$NODE2_PORT"; fi; }
other() { if [ "$1" = node1 ]; then echo node2; else echo node1; fi; }

psql_at() {
    PGCONNECT_TIMEOUT=2 "$PGBIN/psql" -X -qAt -v ON_ERROR_STOP=1 -d "$1" -c "$2" 2>/dev/null
}

# The node whose Patroni says it is the running primary holding the leader
# key (GET /primary answers 200 there only). A dead node does not answer.
current_leader() {
    local n
    for n in "${NODES[@]}"; do
        if [ "$(http_code "http://127.0.0.1:$(rest_port "$n")/primary")" = 200 ]; then
            echo "$n"
            return 0
        fi
    done
    return 1
}

wait_leader() {
    local deadline=$((SECONDS + WAIT)) l
    while [ $SECONDS -lt $deadline ]; do
        l=$(current_leader) && { echo "$l"; return 0; }
        sleep 0.2
    done
    die "no primary after ${WAIT}s"
}

# Healthy: a primary, the other node streaming from it (and its synchronous
# standby in sync mode, as Patroni's /cluster and pg_stat_replication both
# say), and a write-capable session on `onejob` through HAProxy. Sets
# LEADER; NOT_READY says what is missing.
NOT_READY=
LEADER=
ready() {
    local leader standby member repl
    LEADER=
    leader=$(current_leader) || { NOT_READY="no primary"; return 1; }
    standby=$(other "$leader")
    member=$(http_get "http://127.0.0.1:$(rest_port "$leader")/cluster" | "$PY" -c '
import json, sys
for m in json.load(sys.stdin)["members"]:
    if m["name"] == sys.argv[1]:
        print(m["role"], m["state"])' "$standby" 2>/dev/null) || true
    local want_role=replica
    [ "$HA_MODE" = sync ] && want_role=sync_standby
    if [ "$member" != "$want_role running" ]; then
        NOT_READY="$standby is not a running $want_role (Patroni says: ${member:-nothing})"
        return 1
    fi
    repl=$(psql_at "postgres://postgres:postgres@127.0.0.1:$(pg_port "$leader")/postgres" \
        "select state || ' ' || sync_state from pg_stat_replication where application_name = '$standby'") || true
    local want_repl="streaming async"
    [ "$HA_MODE" = sync ] && want_repl="streaming sync"
    if [ "$repl" != "$want_repl" ]; then
        NOT_READY="$standby is not $want_repl on $leader (pg_stat_replication: ${repl:-no row})"
        return 1
    fi
    if [ "$(psql_at "$HA_URL" 'select not pg_is_in_recovery()')" != t ]; then
        NOT_READY="no writable session on onejob through HAProxy"
        return 1
    fi
    NOT_READY=
    LEADER=$leader
}

show_logs() {
    local f
    for f in etcd.log node1.log node2.log haproxy.log; do
        [ -s "$DIR/$f" ] || continue
        printf '== the last lines of %s\n' "$DIR/$f" >&2
        tail -n 25 "$DIR/$f" >&2
    done
}

# Wait until healthy; on timeout say why, show the logs and fail (WHAT: what
# was being waited for).
wait_ready() {
    local what=$1 deadline=$((SECONDS + WAIT))
    while [ $SECONDS -lt $deadline ]; do
        ready && return 0
        sleep 0.2
    done
    show_logs
    die "$what: not healthy after ${WAIT}s: $NOT_READY"
}

# SIGKILL a node: Patroni (with anything it ran, in its process group) and
# every Postgres process of the node. The postmaster is stopped first so it
# forks nothing while its processes are being killed.
kill_node() {
    local node=$1 pids pm i
    kill_daemon "$node"
    pm=$(postmaster_pid "$node")
    [ -z "$pm" ] || kill -STOP "$pm" 2>/dev/null || true
    for i in $(seq 200); do
        pids=$(pg_pids "$node")
        [ -z "$pids" ] && return 0
        # shellcheck disable=SC2086
        kill -9 $pids 2>/dev/null || true
        sleep 0.02
    done
    die "$node: Postgres processes survive SIGKILL: $pids"
}

start_node() {
    local node=$1 user=()
    [ "$(id -u)" = 0 ] && user=(setpriv --reuid=postgres --regid=postgres --init-groups --)
    spawn "$DIR/$node.pid" "$DIR/$node.log" \
        env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$DIR/$node" \
        "${user[@]}" /usr/bin/patroni "$DIR/$node/patroni.yml"
}

# The postmaster of a node, when it runs.
postmaster_pid() {
    local pm
    pm=$(head -n 1 "$DIR/$1/data/postmaster.pid" 2>/dev/null || true)
    case " $(pg_pids "$1" | tr '\n' ' ') " in *" $pm "*) [ -n "$pm" ] && echo "$pm" ;; esac
    return 0
}

# Stop everything started in DIR, quickly: Patroni killed (asked to stop,
# it would hand over and wait for the other node, seconds for nothing: the
# next start makes a new cluster), Postgres shut down in immediate mode,
# then whatever is left killed.
stop_all() {
    local node pm pid name deadline
    for node in "${NODES[@]}"; do
        kill_daemon "$node"
        pm=$(postmaster_pid "$node")
        [ -z "$pm" ] || kill -QUIT "$pm" 2>/dev/null || true
    done
    deadline=$((SECONDS + 5))
    while [ $SECONDS -lt $deadline ] && [ -n "$(pg_pids node1)$(pg_pids node2)" ]; do
        sleep 0.05
    done
    for node in "${NODES[@]}"; do kill_node "$node"; done
    for name in haproxy etcd; do
        for pid in $(daemon_pids "$name"); do kill -TERM "$pid" 2>/dev/null || true; done
    done
    deadline=$((SECONDS + 10))
    while [ $SECONDS -lt $deadline ] && [ -n "$(daemon_pids haproxy)$(daemon_pids etcd)" ]; do
        sleep 0.05
    done
    kill_daemon haproxy
    kill_daemon etcd
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_configs() {
    local mode=$1 sync=true
    [ "$mode" = async ] && sync=false
    local ha_db="postgres://onejob:onejob@127.0.0.1"
    cat > "$DIR/cluster.env" <<EOF
HA_URL=$ha_db:$HA_PORT/onejob
NODE1_URL=$ha_db:$NODE1_PORT/onejob
NODE2_URL=$ha_db:$NODE2_PORT/onejob
MULTI_URL=$ha_db:$NODE1_PORT,127.0.0.1:$NODE2_PORT/onejob?target_session_attrs=read-write
HA_SUPERUSER_URL=postgres://postgres:postgres@127.0.0.1:$HA_PORT/postgres
HA_PORT=$HA_PORT
NODE1_PORT=$NODE1_PORT
NODE2_PORT=$NODE2_PORT
NODE1_REST_PORT=$NODE1_REST_PORT
NODE2_REST_PORT=$NODE2_REST_PORT
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
HA_MODE=$mode
EOF

    # Run by Patroni once, on the node that made the cluster, before the
    # other node copies it: the application's user and database.
    cat > "$DIR/post-bootstrap.sh" <<EOF
#!/bin/sh
set -e
$PGBIN/psql -X -q -v ON_ERROR_STOP=1 -d "\$1" -c "create role onejob login password 'onejob'"
$PGBIN/psql -X -q -v ON_ERROR_STOP=1 -d "\$1" -c "create database onejob owner onejob"
EOF
    chmod 0755 "$DIR/post-bootstrap.sh"

    local node
    for node in "${NODES[@]}"; do
        mkdir -p "$DIR/$node"
        # ttl, loop_wait and retry_timeout: a dead primary is replaced
        # within seconds, and Patroni's rule loop_wait + 2 * retry_timeout
        # <= ttl holds. The lag limit is large: a test writing in bursts
        # must not leave the cluster without a candidate. A replica retries
        # streaming every half second, not every 5 s: it often asks before
        # the primary has made its replication slot. Unix sockets are
        # off: ports alone keep clusters apart, and DIR may be too long a
        # path for a socket.
        cat > "$DIR/$node/patroni.yml" <<EOF
scope: $SCOPE
namespace: $NAMESPACE
name: $node
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$(rest_port "$node")
  connect_address: 127.0.0.1:$(rest_port "$node")
etcd3:
  hosts:
  - 127.0.0.1:$ETCD_PORT
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1073741824
    synchronous_mode: $sync
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 200
        shared_buffers: 32MB
        wal_level: replica
        wal_log_hints: 'on'
        hot_standby: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
        wal_retrieve_retry_interval: 500ms
  initdb:
  - encoding: UTF8
  - locale: C
  - no-sync
  post_bootstrap: $DIR/post-bootstrap.sh
postgresql:
  listen: 127.0.0.1:$(pg_port "$node")
  connect_address: 127.0.0.1:$(pg_port "$node")
  data_dir: $DIR/$node/data
  bin_dir: $PGBIN
  pgpass: $DIR/$node/pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: replicator
      password: replicator
  # The copy starts at once instead of waiting for a spread checkpoint
  # (minutes on an idle primary). Neither initdb nor the copy wait for
  # their files to reach the disk: a cluster that lives for a test run
  # does not need them to survive a power cut, and fsync takes seconds on
  # a busy machine. Postgres itself keeps fsync on.
  basebackup:
  - checkpoint: fast
  - no-sync
  pg_hba:
  - host all all 127.0.0.1/32 scram-sha-256
  - host replication all 127.0.0.1/32 scram-sha-256
  parameters:
    unix_socket_directories: ''
EOF
        [ "$(id -u)" = 0 ] && chown -R postgres: "$DIR/$node"
        chmod 0700 "$DIR/$node"
    done

    # A node is in the backend while its Patroni says it is the primary;
    # checks every second (every half second while down, so a new primary
    # comes in quickly), and the sessions of a node marked down are closed
    # so that no client goes on talking to a demoted or dead primary. Idle
    # pooled connections are kept for half an hour. The check asks with
    # OPTIONS, which Patroni answers with the status alone: a GET's body
    # would be cut off by HAProxy once it has the status, and Patroni would
    # log a traceback for each check. HAProxy runs in the foreground and
    # says on standard error (haproxy.log) when a node goes up or down.
    cat > "$DIR/haproxy.cfg" <<EOF
global
    maxconn 2000

defaults
    mode tcp
    retries 2
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 2s

listen postgres
    bind 127.0.0.1:$HA_PORT
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 1s fastinter 500ms downinter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
    server node1 127.0.0.1:$NODE1_PORT check port $NODE1_REST_PORT
    server node2 127.0.0.1:$NODE2_PORT check port $NODE2_REST_PORT
EOF
}

cmd_start() {
    local mode=sync arg
    DIR=
    for arg in "$@"; do
        case "$arg" in
            --async) mode=async ;;
            --sync) mode=sync ;;
            -*) usage ;;
            *) [ -z "$DIR" ] || usage; DIR=$arg ;;
        esac
    done
    [ -n "$DIR" ] || usage
    local t0=$SECONDS tool
    for tool in /usr/bin/patroni /usr/bin/etcd "$PGBIN/postgres" "$PGBIN/psql"; do
        [ -x "$tool" ] || die "missing $tool"
    done
    local haproxy
    haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
    [ -x "$haproxy" ] || die "missing haproxy"
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 || die "no postgres user (Postgres does not run as root)"
    fi

    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd -P)
    # The path goes unquoted into YAML and into Patroni's command lines.
    case "$DIR" in *[!A-Za-z0-9_./+@-]*) die "DIR must be a path without spaces or special characters: $DIR" ;; esac
    chmod a+x "$DIR"
    if [ "$(id -u)" = 0 ] && ! as_pg test -x "$DIR"; then
        die "the postgres user cannot reach $DIR: every directory above it must be searchable by others (chmod o+x), or choose another DIR"
    fi

    stop_all
    rm -rf "$DIR/etcd" "$DIR/node1" "$DIR/node2"
    rm -f "$DIR"/{cluster.env,post-bootstrap.sh,haproxy.cfg,etcd.log,haproxy.log,node1.log,node2.log}

    local base=${BASE_PORT:-27400}
    case "$base" in ''|*[!0-9]*) die "BASE_PORT must be a number" ;; esac
    [ "$base" -ge 1024 ] && [ "$base" -le 65528 ] || die "BASE_PORT must be between 1024 and 65528"
    ETCD_PORT=$base ETCD_PEER_PORT=$((base + 1))
    NODE1_PORT=$((base + 2)) NODE2_PORT=$((base + 3))
    NODE1_REST_PORT=$((base + 4)) NODE2_REST_PORT=$((base + 5))
    HA_PORT=$((base + 6))
    local p
    for p in $(seq "$base" $((base + 6))); do
        port_in_use "$p" && die "port $p on 127.0.0.1 is in use (another cluster? set BASE_PORT)"
    done

    write_configs "$mode"
    # shellcheck disable=SC1091
    . "$DIR/cluster.env"
    if ! as_pg test -w "$DIR/node1"; then
        die "the postgres user cannot write $DIR/node1"
    fi
    # From here on, a failure stops what was started.
    trap 'status=$?; if [ $status != 0 ]; then log "start failed; stopping the cluster (logs stay in $DIR)"; stop_all; fi' EXIT

    log "starting etcd on 127.0.0.1:$ETCD_PORT"
    spawn "$DIR/etcd.pid" "$DIR/etcd.log" \
        /usr/bin/etcd --name etcd --data-dir "$DIR/etcd" --logger zap \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "etcd=http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster-token "$SCOPE-$base" --initial-cluster-state new
    local deadline=$((t0 + WAIT))
    until case "$(http_get "http://127.0.0.1:$ETCD_PORT/health")" in *'"health":"true"'*) true ;; *) false ;; esac; do
        [ $SECONDS -lt $deadline ] || { show_logs; die "etcd does not answer"; }
        sleep 0.1
    done

    log "starting HAProxy on 127.0.0.1:$HA_PORT"
    spawn "$DIR/haproxy.pid" "$DIR/haproxy.log" "$haproxy" -db -f "$DIR/haproxy.cfg"

    # node1 makes the cluster and node2 copies it, so that node1 is the
    # first primary every time: node2 starts once node1 holds the
    # initialize key (it would otherwise race node1 for it).
    log "starting Patroni on node1 ($mode replication)"
    start_node node1
    local key
    key=$(printf '%s%s/initialize' "$NAMESPACE" "$SCOPE" | base64 -w0)
    until case "$(http_post "http://127.0.0.1:$ETCD_PORT/v3/kv/range" "{\"key\":\"$key\"}")" in *'"kvs"'*) true ;; *) false ;; esac; do
        [ $SECONDS -lt $deadline ] || { show_logs; die "node1 did not initialize the cluster"; }
        [ -n "$(daemon_pids node1)" ] || { show_logs; die "node1's Patroni exited"; }
        sleep 0.1
    done
    log "starting Patroni on node2"
    start_node node2
    WAIT=$((deadline - SECONDS))
    wait_ready start
    trap - EXIT
    log "cluster up in $((SECONDS - t0))s: node1 primary, node2 $( [ "$mode" = sync ] && echo 'synchronous standby' || echo replica); HAProxy on 127.0.0.1:$HA_PORT"
    cat "$DIR/cluster.env"
}

cmd_stop() {
    DIR=${1:-}
    [ -n "$DIR" ] && [ $# -le 1 ] || usage
    # Nothing to stop where there is no directory.
    [ -d "$DIR" ] || return 0
    DIR=$(cd "$DIR" && pwd -P)
    stop_all
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    env)
        [ $# = 2 ] || usage
        DIR=$2; load_env
        cat "$DIR/cluster.env"
        ;;
    leader)
        [ $# = 2 ] || usage
        DIR=$2; load_env
        wait_leader
        ;;
    kill-leader)
        [ $# = 2 ] || usage
        DIR=$2; load_env
        leader=$(wait_leader)
        kill_node "$leader"
        echo "$leader"
        ;;
    restart-node)
        [ $# = 3 ] || usage
        DIR=$2; load_env
        node=$3
        case "$node" in node1|node2) ;; *) die "no node $node (node1 or node2)" ;; esac
        [ -z "$(daemon_pids "$node")" ] || die "$node's Patroni is running"
        # Postgres processes Patroni left behind would keep the node from starting.
        kill_node "$node"
        t0=$SECONDS
        start_node "$node"
        wait_ready "restart-node $node"
        log "$node back as a replica in $((SECONDS - t0))s"
        ;;
    switchover)
        [ $# = 2 ] || [ $# = 3 ] || usage
        DIR=$2; load_env
        case "${3:-node1}" in node1|node2) ;; *) die "no node $3 (node1 or node2)" ;; esac
        # Patroni refuses a switchover to a replica that is not caught up (or,
        # in sync mode, not the synchronous standby): wait for a healthy cluster.
        wait_ready "switchover"
        leader=$LEADER
        candidate=${3:-$(other "$leader")}
        [ "$candidate" != "$leader" ] || die "$candidate is already the primary"
        t0=$SECONDS
        /usr/bin/patronictl -c "$DIR/$leader/patroni.yml" switchover "$SCOPE" \
            --leader "$leader" --candidate "$candidate" --force >&2
        deadline=$((SECONDS + WAIT))
        until ready && [ "$LEADER" = "$candidate" ]; do
            [ $SECONDS -lt $deadline ] || { show_logs; die "switchover: $candidate is not a healthy primary after ${WAIT}s: $NOT_READY"; }
            sleep 0.2
        done
        log "switchover to $candidate in $((SECONDS - t0))s"
        echo "$candidate"
        ;;
    *) usage ;;
esac
