#!/usr/bin/env bash
# The capacity model's measurements (docs/scaling.md): for creating jobs
# (an API server without its worker) and for the whole path (create →
# provider → succeeded, `onejob bench e2e`, worker and simulator in the
# serving processes) with one and with two replicas on one Postgres, the
# jobs per second, the CPU each side spent per job (Postgres's processes and
# the onejob servers', from /proc), and the statements and WAL bytes per job
# (pg_stat_statements, pg_stat_wal), each reset before the run: statements
# sent, and those Postgres runs inside them (the foreign-key checks).
#
#   bench/capacity.sh                      # 64 connections, 10 s per run
#   CONNECTIONS=64 DURATION=30 STATEMENTS=1 bench/capacity.sh   # and each run's statements by calls
#   AB=6 SCHEMA_B="alter table jobs set (fillfactor = 90)" bench/capacity.sh
#
# AB=N measures a schema change instead: N pairs of e2e runs on one
# replica, taken in turns, (a) on a database as migrated and (b) on one
# where SQL SCHEMA_B ran after the migrations (Postgres only), with the
# share of the job rows' updates that were HOT (no index entry written).
# Single runs on a small machine spread widely; only the pairs' means
# compare.
#
# Each run starts on an empty database; after the load stops, the script
# waits for the jobs in flight to finish, so that every job counted has
# done all its statements, and the CPU and statistics cover them all.
source "$(dirname "$0")/lib.sh"
WORKER_CONCURRENCY=${WORKER_CONCURRENCY:-2048}
PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=1000 -c pg_stat_statements.track=all"
[ -n "${DATABASE_URL:-}" ] && { echo "bench/capacity.sh measures a throwaway Postgres of its own (unset DATABASE_URL)" >&2; exit 2; }

build
start_postgres
write_config
sed -i "s/^concurrency = .*/concurrency = $WORKER_CONCURRENCY/" "$WORK/bench.toml"

sql() { psql -qAt -d "$DATABASE_URL" -c "$1"; }

# start_replicas N [flags]: N servers on ports 18080…, pids in REPLICAS.
REPLICAS=()
start_replicas() {
    local n=$1 i; shift
    REPLICAS=()
    for i in $(seq 0 $(( n - 1 ))); do
        ONEJOB_LISTEN=127.0.0.1:$(( 18080 + i )) RUST_LOG=warn "$BIN" serve --config "$WORK/bench.toml" --no-migrate "$@" \
            >"$WORK/server-$i.log" 2>&1 &
        REPLICAS+=($!)
        wait_ready $(( 18080 + i )) "$WORK/server-$i.log"
    done
}
stop_replicas() {
    for pid in "${REPLICAS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${REPLICAS[@]}"; do wait "$pid" 2>/dev/null || true; done
    REPLICAS=()
}
replica_ticks() {
    local total=0 pid
    for pid in "${REPLICAS[@]}"; do total=$(( total + $(own_ticks "$pid") )); done
    echo "$total"
}

# measure NAME SCENARIO REPLICAS [serve flags]: one run into $WORK/NAME.row.
measure() {
    local name=$1 scenario=$2 n=$3; shift 3
    new_database "onejob_capacity_${name/-/_}"
    sql "create extension if not exists pg_stat_statements" >/dev/null
    start_replicas "$n" "$@"
    log "$name: onejob bench $scenario on $n replica(s), $CONNECTIONS connections in all, $DURATION s"
    sql "select pg_stat_statements_reset()" >/dev/null
    sql "select pg_stat_reset_shared('wal')" >/dev/null
    local pg0 servers0
    pg0=$(postgres_ticks); servers0=$(replica_ticks)
    local clients=() i
    for i in $(seq 0 $(( n - 1 ))); do
        "$BIN" bench --url "http://127.0.0.1:$(( 18080 + i ))" --token "$TOKEN" --json "$scenario" \
            --connections $(( CONNECTIONS / n )) --duration "$DURATION" > "$WORK/$name-$i.json" 2>/dev/null &
        clients+=($!)
    done
    for i in "${clients[@]}"; do wait "$i"; done
    # The clients are done; the jobs still in flight finish (e2e) or stay
    # queued (create, no worker).
    if [ "$scenario" = e2e ]; then
        for _ in $(seq 200); do
            [ "$(sql "select count(*) from attempts where state in ('pending', 'running')")" = 0 ] && break
            sleep 0.05
        done
    fi
    local pg servers
    servers=$(( $(replica_ticks) - servers0 ))
    # Stopped before the statistics are read: a backend reports its WAL
    # statistics when idle for a while or when it ends.
    stop_replicas
    # Their backends end with their connections: counted once the
    # postmaster has reaped them.
    for _ in $(seq 100); do
        [ "$(sql "select count(*) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()")" = 0 ] && break
        sleep 0.05
    done
    pg=$(( $(postgres_ticks) - pg0 ))
    local jobs statements nested wal
    jobs=$(sql "select count(*) from jobs")
    # Every statement sent (top level: not the foreign-key checks Postgres
    # runs inside them), but the ones this script sends to read and reset.
    statements=$(sql "select coalesce(sum(calls), 0) from pg_stat_statements
                      where toplevel and query not like '%pg_stat%' and query not like 'create extension%'
                        and query not like 'select count(*) from %'")
    nested=$(sql "select coalesce(sum(calls), 0) from pg_stat_statements where not toplevel")
    wal=$(sql "select wal_bytes from pg_stat_wal")
    # The statements by calls, for the breakdown (STATEMENTS=1 prints it).
    sql "select calls, left(regexp_replace(query, '\s+', ' ', 'g'), 90) from pg_stat_statements
         where query not like '%pg_stat%' order by calls desc limit 12" > "$WORK/$name.statements"
    [ -n "${STATEMENTS:-}" ] && { echo "$name, by calls:"; cat "$WORK/$name.statements"; } >&2
    local ok=0 errors=0 p99=0
    for i in $(seq 0 $(( n - 1 ))); do
        ok=$(( ok + $(field "$WORK/$name-$i.json" ok) ))
        errors=$(( errors + $(field "$WORK/$name-$i.json" errors) ))
        p99=$(python3 -c "print(max($p99, $(field "$WORK/$name-$i.json" p99_ms)))")
    done
    local hot
    hot=$(sql "select coalesce(sum(n_tup_hot_upd), 0) || ' ' || coalesce(sum(n_tup_upd), 0) from pg_stat_user_tables where relname = 'jobs'")
    echo "$name $scenario $n $jobs $ok $errors $p99 $pg $servers $statements $nested $wal $DURATION $hot" > "$WORK/$name.row"
}

if [ -n "${AB:-}" ]; then
    [ -n "${SCHEMA_B:-}" ] || { echo "AB=N needs SCHEMA_B, the SQL of the change to measure" >&2; exit 2; }
    [ "$BACKEND" = postgres ] || { echo "AB=N measures Postgres only" >&2; exit 2; }
    for pair in $(seq "$AB"); do
        AFTER_MIGRATE_SQL= measure "e2e-a$pair" e2e 1
        AFTER_MIGRATE_SQL=$SCHEMA_B measure "e2e-b$pair" e2e 1
    done
    python3 - "$WORK" "$TICKS" "$AB" <<'PY'
import sys
work, ticks, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(f"{'run':<8} {'jobs/s':>8} {'errors':>6} {'p99 ms':>7} {'PG ms/job':>9} {'onejob ms/job':>13} {'WAL B/job':>9} {'HOT updates':>11}")
sums = {"a": [], "b": []}
for i in range(1, pairs + 1):
    for side in "ab":
        name = f"e2e-{side}{i}"
        (_, _, _, jobs, ok, errors, p99, pg, servers, _, _, wal, duration, hot, updates) = open(f"{work}/{name}.row").read().split()
        jobs = max(int(jobs), 1)
        rate = int(ok) / float(duration)
        sums[side].append(rate)
        print(f"{name:<8} {rate:>8.0f} {errors:>6} {float(p99):>7.0f} {int(pg) * 1000 / ticks / jobs:>9.3f} "
              f"{int(servers) * 1000 / ticks / jobs:>13.3f} {int(wal) / jobs:>9.0f} {100 * int(hot) / max(int(updates), 1):>10.0f}%")
for side in "ab":
    print(f"mean {side}: {sum(sums[side]) / len(sums[side]):.0f} jobs/s")
PY
    exit 0
fi

measure create create 1 --no-worker
measure e2e-1 e2e 1
measure e2e-2 e2e 2

python3 - "$WORK" "$TICKS" <<'PY'
import sys
work, ticks = sys.argv[1], int(sys.argv[2])
rows = [open(f"{work}/{name}.row").read().split() for name in ("create", "e2e-1", "e2e-2")]
print(f"{'run':<8} {'replicas':>8} {'jobs/s':>8} {'errors':>6} {'p99 ms':>7} {'PG ms/job':>9} "
      f"{'onejob ms/job':>13} {'stmts/job':>9} {'nested/job':>10} {'WAL B/job':>9} {'jobs/s per PG core':>18}")
for name, scenario, n, jobs, ok, errors, p99, pg, servers, statements, nested, wal, duration, _hot, _updates in rows:
    jobs, pg, servers = max(int(jobs), 1), int(pg), int(servers)
    pg_ms = pg * 1000 / ticks / jobs
    # A seconds-long run may read no tick of Postgres's at all (a backend
    # that ended and is not reaped yet counts nowhere): no rate then.
    per_core = f"{1000 / pg_ms:>18.0f}" if pg_ms > 0 else f"{'-':>18}"
    print(f"{name:<8} {n:>8} {int(ok) / float(duration):>8.0f} {errors:>6} {float(p99):>7.0f} {pg_ms:>9.3f} "
          f"{servers * 1000 / ticks / jobs:>13.3f} {int(statements) / jobs:>9.2f} {int(nested) / jobs:>10.2f} {int(wal) / jobs:>9.0f} "
          f"{per_core}")
PY
