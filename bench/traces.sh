#!/usr/bin/env bash
# What trace export costs: `onejob bench e2e` against a full server with
# tracing off (no OTLP endpoint: no exporter installed), then with every
# span exported (OTEL_EXPORTER_OTLP_ENDPOINT naming a local OTLP/HTTP sink,
# the default sampler: every trace of a request without a sampled-out parent),
# alternating, ROUNDS times, each on a new database.
#
#   bench/traces.sh                      # Postgres, 3 rounds of 15 s each way
#   ROUNDS=5 E2E_DURATION=30 bench/traces.sh
#   ORDER="on off" bench/traces.sh       # each round starting with export on
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
E2E_DURATION=${E2E_DURATION:-15}
WORKER_CONCURRENCY=${WORKER_CONCURRENCY:-2048}

build
start_postgres
write_config ""
sed -i "s/^concurrency = .*/concurrency = $WORKER_CONCURRENCY/" "$WORK/bench.toml"

# The sink: answers every export 200 and counts the spans' bytes.
SINK_PORT=${SINK_PORT:-18090}
python3 - "$SINK_PORT" "$WORK/sink.count" <<'PY' &
import http.server, sys
port, count = int(sys.argv[1]), sys.argv[2]
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        size = int(self.headers.get("content-length", 0))
        self.rfile.read(size)
        with open(count, "a") as f:
            f.write(f"{size}\n")
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
PY
SINK_PID=$!
trap 'kill $SINK_PID 2>/dev/null; cleanup' EXIT

for round in $(seq "$ROUNDS"); do
    for mode in ${ORDER:-off on}; do
        new_database "onejob_bench_traces_${mode}_$round"
        if [ "$mode" = on ]; then
            export OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$SINK_PORT" OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_MAX_QUEUE_SIZE=65536
        else
            unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_BSP_SCHEDULE_DELAY OTEL_BSP_MAX_QUEUE_SIZE
        fi
        : > "$WORK/sink.count"
        start_server
        log "tracing $mode, round $round: onejob bench e2e, $CONNECTIONS connections, $E2E_DURATION s"
        bench e2e --connections "$CONNECTIONS" --duration "$E2E_DURATION" > "$WORK/e2e-$mode-$round.json"
        stop_server
        awk '{n++; b+=$1} END {printf "%d %d\n", n, b}' "$WORK/sink.count" > "$WORK/sink-$mode-$round"
    done
done
unset OTEL_EXPORTER_OTLP_ENDPOINT

python3 - "$WORK" "$ROUNDS" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'round':>5} {'tracing':>7} {'jobs/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} {'exports':>8} {'KiB sent':>9}")
totals = {"off": [], "on": []}
for r in range(1, rounds + 1):
    for mode in ("off", "on"):
        e = json.load(open(f"{work}/e2e-{mode}-{r}.json"))
        exports, size = open(f"{work}/sink-{mode}-{r}").read().split()
        totals[mode].append(e["throughput"])
        print(f"{r:>5} {mode:>7} {e['throughput']:>8,.0f} {e['p50_ms']:>8.2f} {e['p99_ms']:>8.2f} {e['errors']:>6} {exports:>8} {int(size) / 1024:>9,.0f}")
off, on = (sum(v) / len(v) for v in (totals["off"], totals["on"]))
print(f"\nmean: off {off:,.0f} jobs/s, on {on:,.0f} jobs/s: export on costs {100 * (1 - on / off):.1f} % of e2e throughput")
PY
