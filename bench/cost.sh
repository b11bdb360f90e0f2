#!/usr/bin/env bash
# What a job costs, beside graphile-worker and pgbench on the same
# Postgres, measured so that the spread between runs cannot decide: ROUNDS
# rounds, each running every phase once, the phases' order rotated from
# one round to the next (a drift over the script's minutes falls on every
# phase alike); then each figure's median with its range, each round's
# ratios and their medians, and the verdicts against the targets.
#
#   bench/cost.sh                    # Postgres: a throwaway cluster, 5 rounds, 64 callers
#   bench/cost.sh sqlite             # SQLite: onejob's phases only
#   ROUNDS=3 DURATION=10 E2E_DURATION=20 bench/cost.sh
#
# The phases, each on a new database:
#   pgbench reference  a fixed reference for a create: a job row and its
#                      first attempt's row inserted by one statement into
#                      tables of their own, keyed as onejob's
#                      (lib.sh's write_reference_script); unlike the store's
#                      statement (bench/ceiling.sh), it stays the same
#                      whatever the store's schema.
#   graphile complete  graphile-worker 0.18.0's runner with `concurrency`
#                      CONNECTIONS working through FILL queued no-op jobs: jobs
#                      completed a second (rows it deleted in DURATION s,
#                      after WARMUP s), and CPU per completed job, Postgres's
#                      and its node process's.
#   graphile e2e       a closed loop as onejob's: CONNECTIONS callers, each
#                      adding a no-op job and waiting until the runner
#                      (concurrency CONNECTIONS) reports it complete; p50, p99.
#   onejob create      `onejob bench create` against `serve --no-worker`.
#   onejob e2e         `onejob bench e2e` (create on `sim-fast` with
#                      `Prefer: wait=10`, answered when the job succeeded),
#                      the simulator in the server.
#   onejob e2e-poll    `onejob bench e2e-poll`: the same jobs created without
#                      waiting, then long-polled until they succeeded
#                      (reported beside e2e, not held to a target).
#   onejob cost        the same with `sim-fast` served by `onejob sim` in a
#                      process of its own, and per job: the CPU of Postgres
#                      (every process of the cluster) and of the server (the
#                      simulator's apart), statements sent (pg_stat_statements,
#                      top level), WAL bytes, heap row versions written and
#                      of them HOT updates, index entries and row locks
#                      written (pg_waldump over the run's WAL), each also
#                      by table and index (lib.sh's wal_by_relation), and the
#                      server's instructions where `perf stat -e instructions`
#                      counts them on this machine (printed either way).
# Every onejob phase is warmed up for WARMUP s (e2e with e2e), not measured,
# and every phase measures after an ANALYZE of its database (graphile's
# complete after its queue is filled), as a live database's autovacuum
# has it within its first minute (lib.sh's analyze_tables).
#
# Knobs: ROUNDS (5), CONNECTIONS (64), DURATION (10), WARMUP (5),
# E2E_DURATION (20), FILL ((WARMUP + DURATION) × 5,000), ONEJOB_BIN. The
# verdicts are printed, never the exit status: the script fails only when
# something did not run.
source "$(dirname "$0")/lib.sh"
BACKEND=${1:-postgres}
export BACKEND
ROUNDS=${ROUNDS:-5}
E2E_DURATION=${E2E_DURATION:-20}
FILL=${FILL:-$(( (WARMUP + DURATION) * 5000 ))}
[ -n "${DATABASE_URL:-}" ] && { echo "bench/cost.sh measures a throwaway Postgres of its own (unset DATABASE_URL)" >&2; exit 2; }
PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top"
if perf stat -e instructions true 2>&1 | grep -q "not supported"; then
    INSTRUCTIONS=
else
    INSTRUCTIONS=1
fi

build
case "$BACKEND" in
    postgres)
        install_peers
        start_postgres
        PHASES=(pgbench graphile_complete graphile_e2e create e2e e2e_poll cost)
        ;;
    sqlite) PHASES=(create e2e e2e_poll cost) ;;
    *) echo "usage: $0 [postgres|sqlite]" >&2; exit 2 ;;
esac
sql() { psql -qAt -d "$DATABASE_URL" -c "$1"; }

phase_pgbench() {
    local r=$1
    next_database "onejob_cost_pgbench_$r"
    RUN=$(date +%s%N)
    write_reference_script "$WORK/reference.sql"
    pgbench_warm_up "$WORK/reference.sql"
    pgbench_run "create-$r" "$WORK/reference.sql"
    local tps p50 p99
    read -r tps p50 p99 < "$WORK/create-$r.pgbench"
    printf '{"throughput": %s, "p50_ms": %s, "p99_ms": %s}\n' "$tps" "$p50" "$p99" > "$WORK/pgbench-$r.json"
}

phase_graphile_complete() {
    local r=$1
    next_database "onejob_cost_graphile_complete_$r"
    log "graphile-worker: queueing $FILL no-op jobs (not measured)"
    peer "graphile-fill-$r" graphile.mjs fill "$FILL"
    analyze_tables
    log "graphile-worker: runner with concurrency $CONNECTIONS, no-op task, warm-up $WARMUP s, $DURATION s"
    peer "graphile_complete-$r" graphile.mjs complete "$WARMUP" "$DURATION" "$CONNECTIONS"
}

phase_graphile_e2e() {
    local r=$1
    next_database "onejob_cost_graphile_e2e_$r"
    log "graphile-worker: $CONNECTIONS callers each adding a job and waiting for it, warm-up $WARMUP s, $E2E_DURATION s"
    peer "graphile_e2e-$r" graphile.mjs e2e "$CONNECTIONS" "$WARMUP" "$E2E_DURATION"
}

# onejob_phase SCENARIO R SECONDS [serve flags]: `onejob bench SCENARIO`
# for SECONDS on a new database, after a warm-up of the same kind (creates
# for create, e2e for e2e), into $WORK/SCENARIO-R.json.
onejob_phase() {
    local scenario=$1 r=$2 seconds=$3
    shift 3
    next_database "onejob_cost_${scenario//-/_}_$r"
    start_server "$@"
    if [ "$scenario" = create ]; then warm_up; else warm_up_e2e; fi
    log "onejob bench $scenario, $CONNECTIONS connections, $seconds s"
    bench "$scenario" --connections "$CONNECTIONS" --duration "$seconds" > "$WORK/$scenario-$r.json"
    stop_server
}
phase_create() { onejob_phase create "$1" "$DURATION" --no-worker; }
phase_e2e() { onejob_phase e2e "$1" "$E2E_DURATION"; }
phase_e2e_poll() { onejob_phase e2e-poll "$1" "$E2E_DURATION"; }

phase_cost() {
    local r=$1
    start_sim_apart sim-fast
    next_database "onejob_cost_apart_$r"
    [ "$BACKEND" = postgres ] && sql "create extension if not exists pg_stat_statements" >/dev/null
    ONEJOB_BENCH_SIM_KEY=bench start_server
    warm_up_e2e
    log "onejob bench e2e, the simulator apart, $CONNECTIONS connections, $E2E_DURATION s"
    local lsn pg0 server0 sim0 perf=
    if [ "$BACKEND" = postgres ]; then
        sql "select pg_stat_statements_reset()" >/dev/null
        lsn=$(wal_mark)
    fi
    pg0=$(postgres_ticks); server0=$(own_ticks "$SERVER_PID"); sim0=$(own_ticks "$SIM_PID")
    if [ -n "$INSTRUCTIONS" ]; then
        perf stat -e instructions -x, -o "$WORK/perf-$r" -p "$SERVER_PID" &
        perf=$!
    fi
    bench e2e --connections "$CONNECTIONS" --duration "$E2E_DURATION" > "$WORK/cost-$r.json"
    local server sim pg
    server=$(( $(own_ticks "$SERVER_PID") - server0 )); sim=$(( $(own_ticks "$SIM_PID") - sim0 ))
    pg=$(( $(postgres_ticks) - ${pg0:-0} ))
    [ -n "$perf" ] && { kill -INT "$perf"; wait "$perf" || true; }
    local statements=- written="- - - - -" instructions=-
    if [ "$BACKEND" = postgres ]; then
        statements=$(sql "select coalesce(sum(calls), 0) from pg_stat_statements
                          where toplevel and query not like '%pg_stat%' and query not like 'create extension%'")
        written=$(wal_written "$lsn")
        wal_by_relation "$lsn" "$WORK/cost-$r.relations"
    fi
    [ -n "$perf" ] && instructions=$(awk -F, '/instructions/ {print $1}' "$WORK/perf-$r")
    echo "$pg $server $sim $statements $written $instructions" > "$WORK/cost-$r.counts"
    stop_server
    stop_sim_apart
}

for r in $(seq "$ROUNDS"); do
    n=${#PHASES[@]}
    for i in $(seq 0 $(( n - 1 ))); do
        phase=${PHASES[$(( (i + r - 1) % n ))]}
        log "round $r of $ROUNDS: $phase"
        write_config
        "phase_$phase" "$r"
    done
done

python3 - "$WORK" "$ROUNDS" "$TICKS" "$BACKEND" "$CONNECTIONS" "${INSTRUCTIONS:-0}" <<'PY'
import json, os, statistics, sys
work, rounds, ticks, backend, connections = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
counted = sys.argv[6] == "1"
postgres = backend == "postgres"

def load(name, r):
    return json.load(open(f"{work}/{name}-{r}.json"))

def cpu_line(name, r):
    for line in open(f"{work}/cpu"):
        parts = line.split()
        if parts[0] == f"{name}-{r}":
            return [int(x) for x in parts[1:]]
    raise KeyError(name)

rows = {}  # figure -> [value per round]
by_relation = {}  # table or index -> [[inserts, updates, HOT, index entries] a job, per round]
def put(figure, value):
    rows.setdefault(figure, []).append(value)

for r in range(1, rounds + 1):
    if postgres:
        pgbench = load("pgbench", r)
        put("pgbench reference create, /s", pgbench["throughput"])
        put("pgbench reference create p99, ms", pgbench["p99_ms"])
        done = load("graphile_complete", r)
        pg, node = cpu_line("graphile_complete", r)
        jobs = max(done["completed_in_process"], 1)
        put("graphile complete, jobs/s", done["throughput"])
        put("graphile CPU a job: Postgres, µs", pg / ticks / jobs * 1e6)
        put("graphile CPU a job: node, µs", node / ticks / jobs * 1e6)
        put("graphile CPU a job, µs", (pg + node) / ticks / jobs * 1e6)
        ge2e = load("graphile_e2e", r)
        put("graphile e2e, jobs/s", ge2e["throughput"])
        put("graphile e2e p50, ms", ge2e["p50_ms"])
        put("graphile e2e p99, ms", ge2e["p99_ms"])
    create = load("create", r)
    put("onejob create, /s", create["throughput"])
    put("onejob create p99, ms", create["p99_ms"])
    e2e = load("e2e", r)
    put("onejob e2e, jobs/s", e2e["throughput"])
    put("onejob e2e p50, ms", e2e["p50_ms"])
    put("onejob e2e p99, ms", e2e["p99_ms"])
    put("onejob e2e errors", e2e["errors"])
    e2e_poll = load("e2e-poll", r)
    put("onejob e2e-poll, jobs/s", e2e_poll["throughput"])
    put("onejob e2e-poll p99, ms", e2e_poll["p99_ms"])
    put("onejob e2e-poll errors", e2e_poll["errors"])
    cost = load("cost", r)
    jobs = max(cost["ok"], 1)
    pg, server, sim, statements, wal, heap, hot, index, locks, instructions = open(f"{work}/cost-{r}.counts").read().split()
    put("e2e apart, jobs/s", cost["throughput"])
    put("e2e apart errors", cost["errors"])
    put("CPU a job: server, µs", int(server) / ticks / jobs * 1e6)
    put("CPU a job: simulator (apart), µs", int(sim) / ticks / jobs * 1e6)
    if postgres:
        put("CPU a job: Postgres, µs", int(pg) / ticks / jobs * 1e6)
        put("CPU a job: Postgres + server, µs", (int(pg) + int(server)) / ticks / jobs * 1e6)
        put("statements a job", int(statements) / jobs)
        put("WAL a job, bytes", int(wal) / jobs)
        put("row versions a job", int(heap) / jobs)
        put("of them HOT updates", int(hot) / jobs)
        put("index entries a job", int(index) / jobs)
        put("row locks a job", int(locks) / jobs)
        # By table and index: per job, row versions inserted, rows updated,
        # of them HOT, index entries.
        relations = [line.split() for line in open(f"{work}/cost-{r}.relations")]
        updates = sum(int(u) for _, _, u, _, _ in relations)
        put("row updates a job", updates / jobs)
        put("HOT share of row updates", sum(int(h) for _, _, _, h, _ in relations) / max(updates, 1))
        for name, inserted, updated, hot_updated, entries in relations:
            by_relation.setdefault(name, []).append(
                [int(inserted) / jobs, int(updated) / jobs, int(hot_updated) / jobs, int(entries) / jobs])
    if counted and instructions not in ("-", ""):
        put("server instructions a job", int(instructions) / jobs)
    if postgres:
        # A ratio to a peer that did nothing in its window (a queue that ran
        # dry in the warm-up of a short run) is left out.
        def ratio(name, ours, theirs):
            if rows[theirs][-1] > 0:
                put(name, rows[ours][-1] / rows[theirs][-1])
        if done["queued_at_end"] == 0:
            print(f"round {r}: graphile-worker's queue ran dry before the end (raise FILL): its completion and CPU are off", file=sys.stderr)
        ratio("ratio: CPU a job / graphile's", "CPU a job: Postgres + server, µs", "graphile CPU a job, µs")
        ratio("ratio: e2e / graphile complete", "onejob e2e, jobs/s", "graphile complete, jobs/s")
        ratio("ratio: e2e-poll / graphile complete", "onejob e2e-poll, jobs/s", "graphile complete, jobs/s")
        ratio("ratio: create / pgbench reference", "onejob create, /s", "pgbench reference create, /s")
        ratio("ratio: e2e p99 / graphile e2e p99", "onejob e2e p99, ms", "graphile e2e p99, ms")

def fmt(v):
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"

print(f"\n{backend}, {connections} callers, {rounds} rounds; median and range (min-max) of the rounds\n")
print(f"{'figure':38} {'median':>10}   {'range':>22}")
for figure, values in rows.items():
    print(f"{figure:38} {fmt(statistics.median(values)):>10}   {fmt(min(values)) + ' - ' + fmt(max(values)):>22}")
if not counted:
    print("  (server instructions: `perf stat -e instructions` does not count them on this machine)")
if by_relation:
    print(f"\nwritten an e2e job, by table and index (medians of the rounds)\n")
    print(f"{'relation':38} {'inserts':>8} {'updates':>8} {'HOT':>6} {'index':>7}")
    for name, values in sorted(by_relation.items(), key=lambda item: -max(map(sum, item[1]))):
        medians = [statistics.median(v[i] for v in values) for i in range(4)]
        if sum(medians) >= 0.01:
            print(f"{name:38} {medians[0]:8.2f} {medians[1]:8.2f} {medians[2]:6.2f} {medians[3]:7.2f}")

def median(figure):
    return statistics.median(rows[figure]) if figure in rows else None
def target(ok, what, value):
    shown = "n/a" if value is None else f"{value:.2f} x"
    print(f"  {'n/a ' if value is None else 'PASS' if ok(value) else 'FAIL'}  {what}: {shown}")
print("\ntargets (medians of the rounds' ratios)")
if postgres:
    target(lambda v: v <= 1, f"CPU a job (Postgres + server, simulator apart) <= 1 x graphile's no-op at concurrency {connections}",
           median("ratio: CPU a job / graphile's"))
    target(lambda v: v >= 1, f"e2e >= 1 x graphile's completion at concurrency {connections}",
           median("ratio: e2e / graphile complete"))
    target(lambda v: v >= 1, "create >= 1 x pgbench on the reference insert", median("ratio: create / pgbench reference"))
    def bound(ok, what, value, unit=""):
        print(f"  {'PASS' if ok(value) else 'FAIL'}  {what}: {fmt(value)}{unit}")
    bound(lambda v: v <= 25, "create p99 <= 25 ms", median("onejob create p99, ms"), " ms")
    bound(lambda v: v <= 12, "index entries an e2e job <= 12", median("index entries a job"))
    bound(lambda v: v >= 0.5, "at least half of an e2e job's row updates HOT", median("HOT share of row updates"))
    print(f"        e2e p99 {median('onejob e2e p99, ms'):.1f} ms beside graphile's {median('graphile e2e p99, ms'):.1f} ms")
    poll = median("ratio: e2e-poll / graphile complete")
    print(f"        e2e-poll (create, then long-poll): {'n/a' if poll is None else f'{poll:.2f} x'} graphile's completion")
else:
    rate = median("onejob e2e, jobs/s")
    print(f"  {'PASS' if rate >= 3000 else 'FAIL'}  e2e >= 3,000 jobs/s: {rate:,.0f}")
errors = sum(rows["onejob e2e errors"]) + sum(rows["onejob e2e-poll errors"]) + sum(rows["e2e apart errors"])
print(f"  {'PASS' if errors == 0 else 'FAIL'}  no e2e errors: {errors:.0f}")
PY
