#!/usr/bin/env bash
# onejob on Citus beside one Postgres (docs/scaling.md): `onejob bench
# create` (an API server without its worker) and `onejob bench e2e` (create
# → provider → succeeded, worker and simulator in the serving process),
# each on
#   plain   a database without Citus, on the coordinator's server
#   citus1  Citus with one worker (the coordinator holds the reference tables)
#   citus2  Citus with two workers
# all on one cluster of scripts/citus-cluster.sh (a coordinator and two
# workers on loopback), the load spread over OWNERS owners (a key each).
# Each run reports the jobs per second, the errors, and the CPU each node
# and the onejob server spent per job (from /proc, every process of each
# node, ended ones too).
#
# Then a rebalance under load: e2e on citus1, in runs of DURATION s one
# after another; after the first, a second worker is added and the owners'
# shards are rebalanced onto it (citus_rebalance_start, logical
# replication), and the load goes on until the rebalance has finished. It
# fails unless no request failed, every job created succeeded, and shards
# moved.
#
#   bench/citus.sh                       # 64 connections, 16 owners, 10 s per run
#   DURATION=30 OWNERS=32 bench/citus.sh
#   REBALANCE=0 bench/citus.sh           # the runs without the rebalance
#   STATEMENTS=1 bench/citus.sh          # and each run's costliest statements on the coordinator
#   ROUNDS=3 bench/citus.sh              # three rounds, the setups in turns; medians and ranges
#   SHARDS=4 bench/citus.sh              # 4 shards a table rather than Citus's 32
source "$(dirname "$0")/lib.sh"
OWNERS=${OWNERS:-16}
ROUNDS=${ROUNDS:-1}
# Shards per distributed table (Citus's default: 32).
SHARDS=${SHARDS:-32}
REBALANCE=${REBALANCE:-1}
CITUS_BASE_PORT=${CITUS_BASE_PORT:-27600}
[ -n "${DATABASE_URL:-}" ] && { echo "bench/citus.sh measures a Citus cluster of its own (unset DATABASE_URL)" >&2; exit 2; }

build
CITUS=$WORK/citus
mkdir -p "$CITUS"
stop_cluster() { scripts/citus-cluster.sh stop "$CITUS" >/dev/null 2>&1 || true; }
trap 'status=$?; stop_cluster; (exit $status); cleanup' EXIT
log "starting a Citus coordinator and two workers"
BASE_PORT=$CITUS_BASE_PORT scripts/citus-cluster.sh start "$CITUS" 2 >/dev/null
COORDINATOR=$CITUS_BASE_PORT
WORKER1=$(( CITUS_BASE_PORT + 1 ))
WORKER2=$(( CITUS_BASE_PORT + 2 ))
write_config

export PGOPTIONS="-c client_min_messages=warning"
on() { local port=$1 database=$2; shift 2; psql -qAt -h 127.0.0.1 -p "$port" -U postgres -d "$database" -v ON_ERROR_STOP=1 "$@"; }

# database NAME WORKERS: a new database NAME; with WORKERS > 0 on Citus,
# its tables placed on that many workers; migrated, keys for the owners in
# TOKENS. DATABASE_URL names it.
database() {
    local name=$1 workers=$2 port
    for port in "$COORDINATOR" "$WORKER1" "$WORKER2"; do
        on "$port" postgres -c "drop database if exists $name with (force)" -c "create database $name" >/dev/null
    done
    if [ "$workers" -gt 0 ]; then
        for port in "$COORDINATOR" "$WORKER1" "$WORKER2"; do on "$port" "$name" -c "create extension citus" >/dev/null; done
        on "$COORDINATOR" "$name" -c "select citus_set_coordinator_host('127.0.0.1', $COORDINATOR)" >/dev/null
        for port in $(seq "$WORKER1" $(( COORDINATOR + workers ))); do
            on "$COORDINATOR" "$name" -c "select citus_add_node('127.0.0.1', $port)" >/dev/null
        done
        on "$COORDINATOR" "$name" -c "alter database $name set citus.shard_count = $SHARDS" >/dev/null
    fi
    export DATABASE_URL="postgres://postgres@127.0.0.1:$COORDINATOR/$name"
    "$BIN" migrate --config "$WORK/bench.toml" >/dev/null 2>"$WORK/migrate.log" || { cat "$WORK/migrate.log" >&2; exit 1; }
    on "$COORDINATOR" "$name" -c "create extension if not exists pg_stat_statements" >/dev/null
    local tokens=() i
    for i in $(seq "$OWNERS"); do
        tokens+=("$("$BIN" keys create --owner "owner-$i" --config "$WORK/bench.toml" 2>/dev/null | tail -n 1)")
    done
    TOKENS=$(IFS=,; echo "${tokens[*]}")
}

# node_ticks PORT: the CPU ticks of every process of the node on PORT.
node_ticks() {
    local data postmaster total child
    case "$1" in
        "$COORDINATOR") data=$CITUS/coordinator/data ;;
        "$WORKER1") data=$CITUS/worker1/data ;;
        *) data=$CITUS/worker2/data ;;
    esac
    postmaster=$(head -n 1 "$data/postmaster.pid")
    total=$(( $(own_ticks "$postmaster") + $(reaped_ticks "$postmaster") ))
    for child in $(pgrep -P "$postmaster"); do total=$(( total + $(own_ticks "$child") )); done
    echo "$total"
}

# settled: waits until no attempt is pending or running (the e2e jobs in flight).
settled() {
    for _ in $(seq 600); do
        [ "$(on "$COORDINATOR" "${DATABASE_URL##*/}" -c "select count(*) from attempts where state in ('pending', 'running')")" = 0 ] && return
        sleep 0.1
    done
    echo "jobs were still in flight 60 s after the load" >&2
    exit 1
}

# run SETUP WORKERS SCENARIO: one measured run into $WORK/rows.
run() {
    local setup=$1 workers=$2 scenario=$3
    database "bench_${setup}_$scenario" "$workers"   # dropped and made again each round
    local flags=()
    [ "$scenario" = create ] && flags=(--no-worker)
    start_server "${flags[@]}"
    log "$setup: $scenario, $CONNECTIONS connections over $OWNERS owners, $WARMUP s of warm-up, then $DURATION s"
    "$BIN" bench --url "http://127.0.0.1:$PORT" --token "$TOKENS" --json "$scenario" \
        --connections "$CONNECTIONS" --duration "$WARMUP" >/dev/null 2>&1 || true
    [ "$scenario" = e2e ] && settled
    local before=() after=() port
    for port in "$COORDINATOR" "$WORKER1" "$WORKER2"; do before+=("$(node_ticks "$port")"); done
    local server0
    server0=$(own_ticks "$SERVER_PID")
    on "$COORDINATOR" "${DATABASE_URL##*/}" -c "select pg_stat_statements_reset()" >/dev/null
    "$BIN" bench --url "http://127.0.0.1:$PORT" --token "$TOKENS" --json "$scenario" \
        --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/$setup-$scenario.json" 2>/dev/null
    [ "$scenario" = e2e ] && settled
    local server=$(( $(own_ticks "$SERVER_PID") - server0 ))
    for port in "$COORDINATOR" "$WORKER1" "$WORKER2"; do after+=("$(node_ticks "$port")"); done
    if [ -n "${STATEMENTS:-}" ]; then
        echo "$setup $scenario: the coordinator's costliest statements (ms in all, calls, statement)" >&2
        on "$COORDINATOR" "${DATABASE_URL##*/}" -F ' ' -c "select round(total_exec_time)::bigint, calls,
            left(regexp_replace(query, '\s+', ' ', 'g'), 100) from pg_stat_statements
            where query not like '%pg_stat%' order by total_exec_time desc limit 8" >&2
    fi
    stop_server
    echo "$setup $scenario $(field "$WORK/$setup-$scenario.json" ok) $(field "$WORK/$setup-$scenario.json" errors)" \
        "$(field "$WORK/$setup-$scenario.json" p99_ms) $(( after[0] - before[0] )) $(( after[1] - before[1] ))" \
        "$(( after[2] - before[2] )) $server" >> "$WORK/rows"
}

# ROUNDS rounds, the setups in turns (forward, then backward), so that no
# setup always runs first or last.
for round in $(seq "$ROUNDS"); do
    setups=("plain 0" "citus1 1" "citus2 2")
    [ $(( round % 2 )) = 0 ] && setups=("citus2 2" "citus1 1" "plain 0")
    for scenario in create e2e; do
        for setup in "${setups[@]}"; do
            # shellcheck disable=SC2086
            run $setup "$scenario"
        done
    done
done

# Each setup's median of its rounds, with the range.
python3 - "$WORK/rows" "$TICKS" "$DURATION" <<'PY'
import statistics, sys
rows, ticks, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
runs = {}
for line in open(rows):
    setup, scenario, ok, errors, p99, coordinator, w1, w2, server = line.split()
    jobs = max(int(ok), 1)
    per = lambda t: 1000.0 * int(t) / ticks / jobs
    runs.setdefault((scenario, setup), []).append(
        (int(ok) / duration, int(errors), float(p99), per(coordinator), per(w1), per(w2), per(server)))
def cell(values, digits):
    m = statistics.median(values)
    return f"{m:.{digits}f}" if len(values) == 1 else f"{m:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"
print("medians of each setup's rounds (range); CPU in ms per job")
print("scenario setup   jobs/s | errors | p99 ms | coordinator | worker 1 | worker 2 | onejob")
for scenario in ("create", "e2e"):
    for setup in ("plain", "citus1", "citus2"):
        r = runs[(scenario, setup)]
        cols = list(zip(*r))
        print(f"{scenario:<8} {setup:<7} " + " | ".join([cell(cols[0], 0), str(sum(cols[1])), cell(cols[2], 0)]
              + [cell(c, 2) for c in cols[3:]]))
PY

[ "$REBALANCE" = 1 ] || exit 0

# The rebalance under load.
database bench_rebalance 1
start_server
name=bench_rebalance
log "rebalance: e2e in runs of $DURATION s on one worker; a second worker added and the shards rebalanced onto it meanwhile"
# The load: one run after another until the rebalance has finished.
load() {
    local n=0
    while [ ! -e "$WORK/rebalanced" ]; do
        n=$(( n + 1 ))
        "$BIN" bench --url "http://127.0.0.1:$PORT" --token "$TOKENS" --json e2e \
            --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/rebalance-$n.json" 2>/dev/null
    done
}
load &
client=$!
sleep "$DURATION"
on "$COORDINATOR" "$name" -c "select citus_add_node('127.0.0.1', $WORKER2)" >/dev/null
started=$(date +%s.%N)
on "$COORDINATOR" "$name" -c "select citus_rebalance_start()" >/dev/null 2>&1
for _ in $(seq 1200); do
    state=$(on "$COORDINATOR" "$name" -c "select state from citus_rebalance_status() order by job_id desc limit 1")
    [ "$state" = finished ] && break
    [ "$state" = failed ] || [ "$state" = cancelled ] && { echo "the rebalance ended $state" >&2; exit 1; }
    sleep 0.5
done
[ "$state" = finished ] || { echo "the rebalance did not finish in 10 minutes" >&2; exit 1; }
took=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")
touch "$WORK/rebalanced"
wait "$client"
settled
stop_server
moved=$(on "$COORDINATOR" "$name" -c "select count(*) from pg_dist_shard_placement p join pg_dist_shard s using (shardid)
                                       where p.nodeport = $WORKER2 and s.logicalrelid = 'jobs'::regclass")
unfinished=$(on "$COORDINATOR" "$name" -c "select count(*) from jobs where state <> 'succeeded'")
jobs=$(on "$COORDINATOR" "$name" -c "select count(*) from jobs")
ok=0 errors=0 runs=0
for report in "$WORK"/rebalance-*.json; do
    ok=$(( ok + $(field "$report" ok) )); errors=$(( errors + $(field "$report" errors) )); runs=$(( runs + 1 ))
done
echo "rebalance: $ok jobs answered in $runs runs of $DURATION s, $errors errors; the rebalance took $took s and moved" \
    "$moved of jobs's shards to worker 2; $jobs jobs in the database, $unfinished not succeeded"
[ "$errors" = 0 ] && [ "$unfinished" = 0 ] && [ "$moved" -gt 0 ] && [ "$jobs" -ge "$ok" ] \
    || { echo "the rebalance under load lost or failed something" >&2; exit 1; }
