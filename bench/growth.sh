#!/usr/bin/env bash
# Growth: does creating a job get slower as the tables grow, and while
# expired jobs are purged? Measures `onejob bench create`, `poll` and `e2e`
# against a full server (API, worker with its purger, simulator) on an empty
# database; fills it to 1,000,000 finished jobs (each with its attempt and
# events, as onejob writes them), half of them changed 60 days ago, past the
# default 30-day retention; and measures again while the purger (every
# second) takes those 500,000 away. Prints each figure, its ratio to the
# empty database, and the purge's rate.
#
#   bench/growth.sh                  # a throwaway Postgres, 64 connections, 10 s
#   JOBS=1000000 CONNECTIONS=64 DURATION=10 DATABASE_URL=postgres://… bench/growth.sh
source "$(dirname "$0")/lib.sh"
JOBS=${JOBS:-1000000}
# How long to wait, after the measured runs, for the purge to finish.
PURGE_WAIT=${PURGE_WAIT:-900}

build
start_postgres
write_config
# The printed default has a [retention] section: its purge_interval is set there.
sed -i 's/^purge_interval = .*/purge_interval = "1s"/' "$WORK/bench.toml"
new_database onejob_bench_growth

# measure PHASE: e2e, poll and create against a full server, in that
# order: the jobs `create` leaves queued would hold up the others.
measure() {
    start_server
    warm_up_e2e
    for scenario in e2e poll create; do
        log "onejob bench $scenario, $1"
        bench "$scenario" --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/$1-$scenario.json"
    done
    stop_server
}
expired() { psql -At -d "$DATABASE_URL" -c "select count(*) from jobs where updated_at < now() - interval '30 days'"; }

measure empty

log "filling the database to $JOBS jobs"
started=$(date +%s)
psql -q -v ON_ERROR_STOP=1 -v jobs="$JOBS" -d "$DATABASE_URL" <<'SQL'
-- Finished jobs, ids time-ordered like the store's UUIDv7: the odd ones
-- of the last day, the even ones of a day 60 days ago (past the retention).
create temporary table seed as
select n,
       (lpad(to_hex((extract(epoch from at) * 1000)::bigint), 12, '0')
        || substr(md5(n::text), 13))::uuid as id,
       at
from (select n, now() - interval '1 day' + n * (interval '1 day' / :jobs)
                - case when n % 2 = 0 then interval '60 days' else interval '0' end as at
      from generate_series(1, :jobs - (select count(*) from jobs)) n) s;
insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider, state,
                  winning_attempt, result, created_at, updated_at)
select 'bench', id, 'growth-' || n, sha256(n::text::bytea), 'summarize',
       jsonb_build_object('text', 'job ' || n), 'sim-fast', 'succeeded', 1,
       jsonb_build_object('summary', 'job ' || n, 'word_count', 2), at, at
from seed;
insert into attempts (owner_id, job_id, number, id, provider, state, origin, output,
                      created_at, not_before, started_at, finished_at)
select 'bench', id, 1, (lpad(to_hex((extract(epoch from at) * 1000)::bigint), 12, '0')
                        || substr(md5('a' || n), 13))::uuid,
       'sim-fast', 'succeeded', 'client', jsonb_build_object('summary', 'job ' || n, 'word_count', 2),
       at, at, at, at
from seed;
insert into job_events (owner_id, job_id, at, kind, attempt_number, detail)
select 'bench', id, at, 'job-created', 1, jsonb_build_object('provider', 'sim-fast') from seed
union all
select 'bench', id, at, 'attempt-succeeded', 1, '{}'::jsonb from seed;
vacuum analyze;
SQL
log "filled in $(( $(date +%s) - started )) s: $(psql -At -d "$DATABASE_URL" -c 'select count(*) from jobs') jobs, $(expired) past the retention"

purge_started=$(date +%s)
before=$(expired)
measure full
during=$(( before - $(expired) ))
measured_for=$(( $(date +%s) - purge_started ))
log "the purge took $during jobs in the $measured_for s of the measured runs; waiting for the rest (at most $PURGE_WAIT s)"
start_server
while [ "$(expired)" -gt 0 ] && [ $(( $(date +%s) - purge_started )) -lt "$PURGE_WAIT" ]; do sleep 1; done
left=$(expired)
purge_took=$(( $(date +%s) - purge_started ))
stop_server

python3 - "$WORK" "$JOBS" "$before" "$during" "$measured_for" "$left" "$purge_took" <<'PY'
import json, sys
work, jobs, before, during, measured_for, left, took = sys.argv[1], *map(int, sys.argv[2:])
print(f"\n{'scenario':>8} {'database':>32} {'ops/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}  p50 / empty")
for scenario in ("create", "poll", "e2e"):
    empty = json.load(open(f"{work}/empty-{scenario}.json"))
    full = json.load(open(f"{work}/full-{scenario}.json"))
    for name, r in (("empty", empty), (f"{jobs:,} jobs, purging", full)):
        ratio = "" if r is empty else f"  {r['p50_ms'] / empty['p50_ms']:.2f} (ops/s {r['throughput'] / empty['throughput']:.2f})"
        print(f"{scenario:>8} {name:>32} {r['throughput']:>8,.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {r['errors']:>6}{ratio}")
print(f"\npurge: {during:,} of {before:,} expired jobs during the {measured_for} s of measured runs ({during / max(measured_for, 1):,.0f} jobs/s); "
      f"{before - left:,} in {took} s in all ({(before - left) / max(took, 1):,.0f} jobs/s), {left:,} left")
PY
