#!/usr/bin/env bash
# Streamed answers (`onejob bench tokens`) on one backend, the task
# `summarize` streaming, the simulator in a process of its own (`onejob sim`
# on SIM_PORT, 19090) that the server's providers and the reference share:
#   the time to first token at 1 and at CONNECTIONS (64) callers, through onejob (sending
#   POST /jobs to the first delta of GET /jobs/{id}/output) beside the
#   simulator's own (sending its request to its first piece), on
#   `sim-tokens` (first piece after 5 ms, then 100 a second);
#   STREAMS (1,000) callers at once for STREAMS_DURATION (20) s on
#   `sim-tokens-long` (first piece after 1 s, then 20 a second): each delta's delay from the simulator's sending
#   of its first piece to the caller, and the server's peak memory;
#   Postgres: the rows, WAL and CPU per 1,000 streamed tokens at CONNECTIONS
#   callers, against the same jobs answered whole (`bench e2e`, the task not
#   streaming), each run after WARMUP (5) s of it, not counted, and an ANALYZE.
#
# Exit status 1 when a run's requests or streams failed (through onejob, or
# straight from the simulator), or a run timed none: `onejob bench` reports
# its errors and exits 0 all the same.
#
#   bench/tokens.sh postgres|sqlite
#   DURATION=10 CONNECTIONS=64 STREAMS=1000 STREAMS_DURATION=20 WARMUP=5 bench/tokens.sh postgres
source "$(dirname "$0")/lib.sh"
BACKEND=${1:-postgres}
export BACKEND
STREAMS=${STREAMS:-1000}
STREAMS_DURATION=${STREAMS_DURATION:-20}
SIM_PORT=${SIM_PORT:-19090}

build
start_backend
write_config "$(sim_provider sim-tokens 'timeout_ms = 30000
latency_ms = 5
tokens_per_second = 100')
$(sim_provider sim-tokens-long 'timeout_ms = 60000
first_token_ms = 1000
tokens_per_second = 20')"
# Every open output holds one of its owner's long-poll places; the worker
# runs every stream's attempt at once.
sed -i -e "s/^max_long_polls_per_owner = .*/max_long_polls_per_owner = $(( STREAMS + 256 ))/" \
    -e "/^\[worker\]/,/^\[/ s/^concurrency = .*/concurrency = $(( STREAMS + 256 ))/" "$WORK/bench.toml"
# streaming ON|OFF: whether the task summarize streams.
streaming() {
    sed -i '/^stream = /d' "$WORK/bench.toml"
    [ "$1" = on ] && sed -i 's/^\[tasks.summarize\]$/[tasks.summarize]\nstream = true/' "$WORK/bench.toml"
    return 0
}
streaming on
start_sim "$WORK/bench.toml"
SIM_URL=http://127.0.0.1:$SIM_PORT
export ONEJOB_SIM_URL=$SIM_URL

wal() { psql -qAt -d "$DATABASE_URL" -c "select pg_current_wal_insert_lsn() - '0/0'::pg_lsn"; }
sql() { psql -qAt -d "$DATABASE_URL" -c "$1"; }

# What the database holds: job_output rows, completion tokens, jobs.
written() {
    echo "$(sql "select count(*) from job_output") \
$(sql "select coalesce(sum(completion_tokens), 0) from attempts") $(sql "select count(*) from jobs")"
}

# Waits until no attempt is pending or running (at most 30 s).
settled() {
    for _ in $(seq 300); do
        [ "$(sql "select count(*) from attempts where state in ('pending', 'running')")" = 0 ] && return 0
        sleep 0.1
    done
    log "attempts still open after 30 s"
}

# run NAME CALLERS PROVIDER [flags]: one tokens run on a new database. With
# WARM=1 (the run whose writes and CPU are counted), on Postgres, after
# WARMUP s of the same run, not measured, its jobs ended, and an ANALYZE
# (lib.sh's analyze_tables), as the other scripts' runs.
run() {
    local name=$1 callers=$2 provider=$3; shift 3
    new_database "onejob_bench_$name"
    start_server
    if [ "${WARM:-0}" = 1 ] && [ "$BACKEND" = postgres ] && [ "$WARMUP" -gt 0 ]; then
        log "warming up: onejob bench tokens for $WARMUP s, not measured"
        bench tokens --connections "$callers" --duration "$WARMUP" --provider "$provider" --sim-url "$SIM_URL" \
            --server-pid "$SERVER_PID" "$@" > /dev/null
        settled
        analyze_tables
    fi
    local wal0=0 pg0 server0 before="0 0 0"
    [ "$BACKEND" = postgres ] && wal0=$(wal) && before=$(written)
    pg0=$(postgres_ticks); server0=$(own_ticks "$SERVER_PID")
    log "$BACKEND: onejob bench tokens, $callers callers on $provider, $DURATION s"
    bench tokens --connections "$callers" --duration "$DURATION" --provider "$provider" --sim-url "$SIM_URL" \
        --server-pid "$SERVER_PID" "$@" > "$WORK/$name.json"
    echo "$(( $(postgres_ticks) - ${pg0:-0} )) $(( $(own_ticks "$SERVER_PID") - server0 ))" > "$WORK/$name.cpu"
    if [ "$BACKEND" = postgres ]; then
        local after
        after=$(written)
        echo "$(( $(wal) - wal0 ))" $(python3 -c 'import sys; b, a = sys.argv[1].split(), sys.argv[2].split()
print(*(int(y) - int(x) for x, y in zip(b, a)))' "$before" "$after") > "$WORK/$name.wal"
    fi
    stop_server
}

run one 1 sim-tokens
WARM=1 run many "$CONNECTIONS" sim-tokens
DURATION=$STREAMS_DURATION run streams "$STREAMS" sim-tokens-long
if [ "$BACKEND" = postgres ]; then
    # The same jobs answered whole: `bench e2e` (on sim-fast).
    streaming off
    new_database onejob_bench_whole
    start_server
    warm_up_e2e
    settled
    wal0=$(wal)
    read -r _ tokens0 jobs0 <<< "$(written)"
    pg0=$(postgres_ticks); server0=$(own_ticks "$SERVER_PID")
    log "$BACKEND: the same jobs answered whole (bench e2e), $CONNECTIONS callers"
    bench e2e --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/whole.json"
    echo "$(( $(postgres_ticks) - ${pg0:-0} )) $(( $(own_ticks "$SERVER_PID") - server0 ))" > "$WORK/whole.cpu"
    read -r _ tokens1 jobs1 <<< "$(written)"
    echo "$(( $(wal) - wal0 )) 0 $(( tokens1 - tokens0 )) $(( jobs1 - jobs0 ))" > "$WORK/whole.wal"
    stop_server
fi

python3 - "$WORK" "$BACKEND" "$TICKS" <<'PY'
import json, os, sys
work, backend, ticks = sys.argv[1], sys.argv[2], int(sys.argv[3])
# Every run's failures: its errors through onejob and straight from the
# simulator (each caller's first stream is not timed, but its failure is
# counted), and a run that timed nothing (the streams run aside: in a
# seconds-long run each caller's one stream is its first).
failures = []
for name in ("one", "many", "streams", "whole"):
    if not os.path.exists(f"{work}/{name}.json"):
        continue
    r = json.load(open(f"{work}/{name}.json"))
    x = r.get("extra") or {}
    if r["errors"] or x.get("direct_errors"):
        failures.append(f"{name}: {r['errors']} errors through onejob, {x.get('direct_errors', 0)} straight from "
                        f"the simulator; the first: {x.get('first_error')}")
    elif name != "streams" and (r["ok"] == 0 or x.get("direct_first_token", {}).get("count", 1) == 0):
        failures.append(f"{name}: nothing timed through onejob or straight from the simulator")
print(f"\n{backend}: time to first token (ms), through onejob beside the simulator's own")
print(f"{'run':8} {'callers':>7} {'streams':>7} {'errors':>6} {'onejob p50':>10} {'p99':>8} {'direct p50':>10} {'p99':>8} {'added p50':>9} {'p99':>8}  piece->caller p50 / p99 / max  peak RSS MiB")
for name in ("one", "many", "streams"):
    r = json.load(open(f"{work}/{name}.json"))
    x = r["extra"]; d = x["direct_first_token"]; p = x["piece_to_caller"]
    print(f"{name:8} {r['connections']:>7} {x['streams']:>7} {r['errors']:>6} {r['p50_ms']:>10.1f} {r['p99_ms']:>8.1f} "
          f"{d['p50_ms']:>10.1f} {d['p99_ms']:>8.1f} {x['added_p50_ms']:>9.1f} {x['added_p99_ms']:>8.1f}  "
          f"{p['p50_ms']:.1f} / {p['p99_ms']:.1f} / {p['max_ms']:.1f}  {x['peak_rss_mib']}")
if os.path.exists(f"{work}/many.wal"):
    wal, rows, tokens, jobs = map(int, open(f"{work}/many.wal").read().split())
    wwal, _, wtokens, wjobs = map(int, open(f"{work}/whole.wal").read().split())
    tokens, jobs, wjobs = max(tokens, 1), max(jobs, 1), max(wjobs, 1)
    per_job, whole_per_job = wal / jobs, wwal / wjobs
    print(f"\nstreamed: {jobs} jobs, {tokens} tokens, {rows} job_output rows, WAL {wal} B: "
          f"{1000 * rows / tokens:.0f} rows and {1000 * wal / tokens:,.0f} B of WAL per 1,000 tokens, {per_job:,.0f} B a job")
    print(f"whole:    {wjobs} jobs, {wtokens} tokens, WAL {wwal} B: {whole_per_job:,.0f} B a job")
    print(f"the output's own: {per_job - whole_per_job:,.0f} B of WAL a job, "
          f"{1000 * (per_job - whole_per_job) * jobs / tokens:,.0f} B per 1,000 tokens")
    # CPU, the simulator apart (it is a process of its own here).
    pg, server = (int(x) / ticks * 1e3 for x in open(f"{work}/many.cpu").read().split())
    wpg, wserver = (int(x) / ticks * 1e3 for x in open(f"{work}/whole.cpu").read().split())
    print(f"CPU, ms: streamed {1000 * pg / tokens:.2f} Postgres + {1000 * server / tokens:.2f} server per 1,000 tokens, "
          f"{pg / jobs:.3f} + {server / jobs:.3f} a job; whole {wpg / wjobs:.3f} + {wserver / wjobs:.3f} a job")
if failures:
    print("\nFAILED: " + "; ".join(failures))
    sys.exit(1)
PY
