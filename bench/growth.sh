#!/usr/bin/env bash
# Growth: does creating a job get slower as the tables grow? Measures
# `onejob bench create` on an empty database, fills it to 1,000,000 jobs
# (each with its attempt and events, as onejob writes them), and measures
# again; prints both and their ratio.
#
#   bench/growth.sh                  # a throwaway Postgres, 64 connections, 10 s
#   JOBS=1000000 CONNECTIONS=64 DURATION=10 DATABASE_URL=postgres://… bench/growth.sh
source "$(dirname "$0")/lib.sh"
JOBS=${JOBS:-1000000}

build
start_postgres
write_config
new_database onejob_bench_growth

start_server --no-worker
warm_up
log "onejob bench create on an empty database"
bench create --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/empty.json"
stop_server

log "filling the database to $JOBS jobs"
started=$(date +%s)
psql -q -v ON_ERROR_STOP=1 -v jobs="$JOBS" -d "$DATABASE_URL" <<'SQL'
-- Finished jobs of the last day, ids time-ordered like the store's UUIDv7.
create temporary table seed as
select n,
       (lpad(to_hex((extract(epoch from at) * 1000)::bigint), 12, '0')
        || substr(md5(n::text), 13))::uuid as id,
       at
from (select n, now() - interval '1 day' + n * (interval '1 day' / :jobs) as at
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
log "filled in $(( $(date +%s) - started )) s: $(psql -At -d "$DATABASE_URL" -c 'select count(*) from jobs') jobs"

start_server --no-worker
log "onejob bench create on the full database"
bench create --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/full.json"
stop_server

python3 - "$WORK" "$JOBS" <<'PY'
import json, sys
work, jobs = sys.argv[1], int(sys.argv[2])
empty = json.load(open(f"{work}/empty.json")); full = json.load(open(f"{work}/full.json"))
print(f"\ncreate, {empty['connections']} connections")
print(f"{'database':>22} {'jobs/s':>8} {'p50 ms':>7} {'p99 ms':>7}")
for name, r in (("empty", empty), (f"{jobs:,} jobs", full)):
    print(f"{name:>22} {r['throughput']:>8,.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f}")
print(f"p50 at {jobs:,} jobs / p50 empty: {full['p50_ms'] / empty['p50_ms']:.2f}")
PY
