#!/usr/bin/env bash
# The ceiling, side by side: pgbench runs the exact statements the Postgres
# store sends for a new job and for a poll (printed by `onejob bench-sql`,
# not retyped), at the same concurrency against the same Postgres; then
# `onejob bench` drives a onejob API server on that Postgres over HTTP; the
# figures and their ratios are printed together. Also measured in the same
# run: replay against create, and the same-key storm.
#
#   bench/ceiling.sh                 # a throwaway Postgres, 64 connections, 10 s
#   CONNECTIONS=32 DURATION=30 bench/ceiling.sh
#   DATABASE_URL=postgres://… bench/ceiling.sh
#
# The API server runs without its worker (`serve --no-worker`), so that both
# sides run the same statements: the jobs stay queued.
source "$(dirname "$0")/lib.sh"

build
start_postgres
write_config
new_database onejob_bench_ceiling
RUN=$(date +%s)

# onejob_run SCENARIO: onejob bench into $WORK/SCENARIO.json, with the CPU
# time of Postgres, the load generator and the server.
onejob_run() {
    log "onejob bench $1, $CONNECTIONS connections, $DURATION s"
    local pg0 client0 server0
    pg0=$(postgres_ticks); client0=$(reaped_ticks $$); server0=$(own_ticks "$SERVER_PID")
    bench "$1" --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/$1.json"
    echo "onejob-$1 $(( $(postgres_ticks) - ${pg0:-0} )) $(( $(reaped_ticks $$) - client0 )) $(( $(own_ticks "$SERVER_PID") - server0 ))" >> "$WORK/cpu"
}

# A new job: the store's own statement (lib.sh), warmed up for WARMUP s
# before the measured run.
write_create_script "$WORK/create.sql"
pgbench_warm_up "$WORK/create.sql"
pgbench_run create "$WORK/create.sql"

# A poll: one script per existing job id (pgbench picks among them at random).
polls=()
n=0
for id in $(psql -At -d "$DATABASE_URL" -c "select id from jobs order by random() limit 64"); do
    n=$((n + 1))
    "$BIN" bench-sql poll | sed -e "s/\$1/'bench'/g" -e "s/\$2/'$id'::uuid/g" > "$WORK/poll-$n.sql"
    polls+=("$WORK/poll-$n.sql")
done
pgbench_run poll "${polls[@]}"

start_server --no-worker
for scenario in create poll replay; do
    onejob_run "$scenario"
done
log "onejob bench storm"
bench storm > "$WORK/storm.json"
stop_server

python3 - "$WORK" "$CONNECTIONS" "$DURATION" "$TICKS" "${CLUSTER:+ours}" <<'PY'
import json, sys
work, connections, duration, ticks, ours = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else ""
def pg(name):
    tps, p50, p99 = open(f"{work}/{name}.pgbench").read().split()
    return float(tps), float(p50), float(p99)
def ob(name):
    r = json.load(open(f"{work}/{name}.json"))
    return r["throughput"], r["p50_ms"], r["p99_ms"], r["errors"], r
rows = []
for name in ("create", "poll"):
    ptps, pp50, pp99 = pg(name)
    otps, op50, op99, errors, _ = ob(name)
    rows.append((name, ptps, pp50, pp99, otps, op50, op99, errors, otps / ptps))
print(f"\n{connections} connections, {duration} s each; pgbench runs the store's statements, onejob bench goes through HTTP\n")
print(f"{'':8} {'pgbench /s':>11} {'p50 ms':>7} {'p99 ms':>7} | {'onejob /s':>10} {'p50 ms':>7} {'p99 ms':>7} {'errors':>7} | {'ratio':>6}")
for name, ptps, pp50, pp99, otps, op50, op99, errors, ratio in rows:
    print(f"{name:8} {ptps:>11,.0f} {pp50:>7.2f} {pp99:>7.2f} | {otps:>10,.0f} {op50:>7.2f} {op99:>7.2f} {errors:>7} | {ratio:>6.2f}")
create = ob("create")[0]
rtps, rp50, rp99, rerr, _ = ob("replay")
print(f"{'replay':8} {'':>11} {'':>7} {'':>7} | {rtps:>10,.0f} {rp50:>7.2f} {rp99:>7.2f} {rerr:>7} | {rtps / create:>5.2f}x create")
stps, sp50, sp99, serr, storm = ob("storm")
print(f"{'storm':8} 1,000 requests with one key: {storm['extra']['distinct_job_ids']} job; p50 {sp50:.2f} ms, p99 {sp99:.2f} ms, max {storm['max_ms']:.2f} ms, errors {serr}")
cpu = {line.split()[0]: [int(x) for x in line.split()[1:]] for line in open(f"{work}/cpu")}
def done(name):
    if name.startswith("pgbench-"):
        return float(open(f"{work}/{name[8:]}.out").read().split("number of transactions actually processed: ")[1].split()[0].split("/")[0])
    return json.load(open(f"{work}/{name[7:]}.json"))["ok"]
print("\nCPU time per request, microseconds (Postgres: every process of the cluster; client: pgbench or onejob bench)")
print(f"{'':16} {'postgres':>9} {'client':>7} {'server':>7}")
for name in ("pgbench-create", "onejob-create", "pgbench-poll", "onejob-poll", "onejob-replay"):
    if name not in cpu:
        continue
    n = done(name)
    pg, client, server = (t / ticks / n * 1e6 for t in cpu[name])
    pg_text = f"{pg:>9.0f}" if ours else f"{'n/a':>9}"
    server_text = f"{server:>7.0f}" if name.startswith("onejob") else f"{'':>7}"
    print(f"{name:16} {pg_text} {client:>7.0f} {server_text}")
PY
