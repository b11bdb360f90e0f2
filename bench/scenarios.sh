#!/usr/bin/env bash
# Every `onejob bench` scenario on one backend, in one run:
#   create, replay, poll and storm against an API server (`--no-worker`);
#   e2e (30 s), inflight (10,000 jobs on a provider answering in 2 s) and
#   streams (1,000 jobs on a provider answering in 5 s, one event stream
#   open on each) against a full server (API, worker and the built-in
#   simulator); then inflight again with the simulator in a process of its
#   own (`onejob sim` on SIM_PORT, 19090), whose ends of the calls are then
#   not in the server's memory.
#
#   bench/scenarios.sh postgres      # a throwaway Postgres (or DATABASE_URL)
#   bench/scenarios.sh sqlite        # a SQLite file in a temporary directory
#   CONNECTIONS=64 DURATION=10 E2E_DURATION=30 INFLIGHT_JOBS=10000 STREAMS=1000 STREAMS_LATENCY_MS=5000 WORKER_CONCURRENCY=2048 bench/scenarios.sh sqlite
source "$(dirname "$0")/lib.sh"
BACKEND=${1:-postgres}
export BACKEND
E2E_DURATION=${E2E_DURATION:-30}
INFLIGHT_JOBS=${INFLIGHT_JOBS:-10000}
STREAMS=${STREAMS:-1000}
# Long enough for every job of `streams` to be created, and its stream
# opened, before the first one finishes: all the streams open at once.
STREAMS_LATENCY_MS=${STREAMS_LATENCY_MS:-5000}
WORKER_CONCURRENCY=${WORKER_CONCURRENCY:-2048}

build
start_backend
write_config "$(sim_provider sim-streams "timeout_ms = $(( STREAMS_LATENCY_MS + 10000 ))
latency_ms = $STREAMS_LATENCY_MS")"
# inflight: attempts in flight at once in the worker. Each holds a connection
# to the built-in simulator, whose end is in the same process: two file
# descriptors per attempt, under the usual limit of 20,000.
sed -i "s/^concurrency = .*/concurrency = $WORKER_CONCURRENCY/" "$WORK/bench.toml"
new_database onejob_bench_api
start_server --no-worker
warm_up
for scenario in create replay poll; do
    log "$BACKEND: onejob bench $scenario, $CONNECTIONS connections, $DURATION s"
    bench "$scenario" --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/$scenario.json"
done
log "$BACKEND: onejob bench storm"
bench storm > "$WORK/storm.json"
stop_server

new_database onejob_bench_e2e
start_server
log "$BACKEND: onejob bench e2e, $CONNECTIONS connections, $E2E_DURATION s"
bench e2e --connections "$CONNECTIONS" --duration "$E2E_DURATION" > "$WORK/e2e.json"
stop_server
new_database onejob_bench_inflight
start_server
log "$BACKEND: onejob bench inflight, $INFLIGHT_JOBS jobs on sim-2s"
bench inflight --jobs "$INFLIGHT_JOBS" --connections 256 --provider sim-2s --server-pid "$SERVER_PID" > "$WORK/inflight.json"
stop_server
# streams: each open stream holds one of its owner's long-poll places.
sed -i "s/^max_long_polls_per_owner = .*/max_long_polls_per_owner = $(( STREAMS > 256 ? STREAMS : 256 ))/" "$WORK/bench.toml"
new_database onejob_bench_streams
start_server
log "$BACKEND: onejob bench streams, $STREAMS streams on a provider answering in $STREAMS_LATENCY_MS ms"
bench streams --jobs "$STREAMS" --connections "$CONNECTIONS" --provider sim-streams > "$WORK/streams.json"
stop_server
start_sim_apart sim-2s
new_database onejob_bench_inflight_apart
ONEJOB_BENCH_SIM_KEY=bench start_server
log "$BACKEND: onejob bench inflight, $INFLIGHT_JOBS jobs on sim-2s, the simulator in its own process"
bench inflight --jobs "$INFLIGHT_JOBS" --connections 256 --provider sim-2s --server-pid "$SERVER_PID" > "$WORK/inflight-apart.json"
stop_server
stop_sim_apart

python3 - "$WORK" "$BACKEND" <<'PY'
import json, sys
work, backend = sys.argv[1], sys.argv[2]
print(f"\n{backend}")
print(f"{'scenario':14} {'conns':>5} {'ok':>8} {'errors':>6} {'ops/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}  extra")
for name in ("create", "replay", "poll", "storm", "e2e", "inflight", "streams", "inflight-apart"):
    r = json.load(open(f"{work}/{name}.json"))
    extra = "" if r["extra"] is None else json.dumps(r["extra"])
    if name.startswith("inflight"):
        extra += f"  all done in {r['seconds']:.1f} s"
    if name == "inflight-apart":
        extra += "  (the simulator in its own process)"
    if name == "streams":
        extra += "  (latency: from each event's commit to its arrival on its stream)"
    print(f"{name:14} {r['connections']:>5} {r['ok']:>8} {r['errors']:>6} {r['throughput']:>8,.0f} {r['p50_ms']:>8.2f} {r['p90_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['max_ms']:>8.2f}  {extra}")
PY
