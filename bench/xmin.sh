#!/usr/bin/env bash
# One session idle in a transaction holds Postgres's xmin horizon while
# onejob runs end-to-end load: vacuum cannot remove the rows dead since that
# transaction began, and the tables and their indexes carry them.
#
# e2e load (`onejob bench e2e`, CONNECTIONS clients) in SEGMENT-second runs:
# BEFORE seconds without the hold, HOLD seconds with it, AFTER seconds once
# it is released. For each run, the jobs done per second and the dead rows
# of jobs, attempts and job_events (pg_stat_user_tables.n_dead_tup) at its
# end, and the age of the oldest transaction; docs/guarantees.md has what it
# gave.
#
#   bench/xmin.sh                                   # 60 s before, 300 s held, 120 s after
#   HOLD=30 BEFORE=20 AFTER=20 SEGMENT=10 bench/xmin.sh
source "$(dirname "$0")/lib.sh"
BACKEND=postgres
BEFORE=${BEFORE:-60}
HOLD=${HOLD:-300}
AFTER=${AFTER:-120}
SEGMENT=${SEGMENT:-30}

build
start_backend
write_config ""
new_database onejob_bench_xmin
start_server
warm_up

report() {
    local phase=$1 file=$2
    psql -qAt -d "$DATABASE_URL" -F ' ' -c "
        select '$phase',
               round($(field "$file" throughput)::numeric, 0),
               coalesce(sum(n_dead_tup) filter (where relname = 'jobs'), 0),
               coalesce(sum(n_dead_tup) filter (where relname = 'attempts'), 0),
               coalesce(sum(n_dead_tup) filter (where relname = 'job_events'), 0),
               (select coalesce(max(extract(epoch from now() - xact_start))::int, 0) from pg_stat_activity
                 where state = 'idle in transaction')
        from pg_stat_user_tables"
}

segments() {
    local phase=$1 seconds=$2 elapsed=0
    while [ "$elapsed" -lt "$seconds" ]; do
        bench e2e --connections "$CONNECTIONS" --duration "$SEGMENT" > "$WORK/segment.json"
        elapsed=$((elapsed + SEGMENT))
        report "$phase+${elapsed}s" "$WORK/segment.json"
    done
}

echo "phase jobs_per_s dead_jobs dead_attempts dead_job_events oldest_idle_transaction_s"
segments before "$BEFORE"
# The hold: a transaction that took a snapshot and a transaction id, then
# sits idle until released.
mkfifo "$WORK/hold"
psql -qAt -d "$DATABASE_URL" < "$WORK/hold" > /dev/null &
HOLDER=$!
exec 7>"$WORK/hold"
echo "begin isolation level repeatable read; select txid_current(), count(*) from jobs;" >&7
segments held "$HOLD"
echo "commit;" >&7
exec 7>&-
wait "$HOLDER"
segments released "$AFTER"
stop_server
