#!/usr/bin/env bash
# What the push side costs the whole path: `onejob bench e2e` against a full
# server (API, worker, built-in simulator) in three configurations, taken in
# turns so that a drift of the machine falls on all of them alike:
#   none      the default: no webhook endpoint, cancel_losers on;
#   hooked    one endpoint of the benchmark's owner subscribed to every
#             event type, on a local receiver answering 204 at once;
#   kept      no endpoint, cancel_losers off (no call is watched for its
#             job's end).
# Each run starts on an empty database, warmed up by an e2e run first
# (then ANALYZE: lib.sh's warm_up_e2e).
#
#   bench/push.sh                 # a throwaway Postgres (or DATABASE_URL)
#   ROUNDS=3 ORDER='kept hooked none' CONNECTIONS=64 DURATION=10 PORT=18081 bench/push.sh
source "$(dirname "$0")/lib.sh"
BACKEND=postgres
export BACKEND
ROUNDS=${ROUNDS:-2}
RECEIVER_PORT=${RECEIVER_PORT:-18099}

build
start_postgres

# The receiver: every POST answered 204, counted.
python3 - "$RECEIVER_PORT" "$WORK/received" <<'PY' &
import http.server, sys, threading
port, counter = int(sys.argv[1]), sys.argv[2]
lock, count = threading.Lock(), [0]
class Hook(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(204)
        self.end_headers()
        with lock:
            count[0] += 1
            open(counter, "w").write(str(count[0]))
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Hook).serve_forever()
PY
RECEIVER_PID=$!
trap 'kill $RECEIVER_PID 2>/dev/null; cleanup' EXIT

run() {
    local name=$1 round=$2 cancel=$3 hooked=$4
    write_config
    # The printed default has a [webhooks] section: its allow_hosts is set there.
    sed -i 's/^allow_hosts = .*/allow_hosts = ["127.0.0.1"]/' "$WORK/bench.toml"
    sed -i "/^\[tasks.summarize\]/a cancel_losers = $cancel" "$WORK/bench.toml"
    new_database "onejob_push_${name}_$round"
    start_server
    if [ "$hooked" = yes ]; then
        local admin
        admin=$("$BIN" keys create --owner bench --role admin --config "$WORK/bench.toml" 2>/dev/null | tail -n 1)
        curl -sf "http://127.0.0.1:$PORT/webhooks" -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
            -d "{\"url\": \"http://127.0.0.1:$RECEIVER_PORT/hook\", \"events\": [\"job.succeeded\", \"job.failed\", \"job.unknown\", \"job.canceled\", \"attempt.unknown\", \"attempt.superseded\"]}" >/dev/null
    fi
    warm_up_e2e
    log "round $round: $name, onejob bench e2e, $CONNECTIONS connections, $DURATION s"
    local server_before postgres_before
    server_before=$(own_ticks "$SERVER_PID")
    postgres_before=$(postgres_ticks)
    bench e2e --connections "$CONNECTIONS" --duration "$DURATION" > "$WORK/$name-$round.json"
    # CPU ticks of the server and of Postgres (a throwaway cluster only) over the measured run.
    echo "$(( $(own_ticks "$SERVER_PID") - server_before )) $(( ${postgres_before:+$(postgres_ticks) - postgres_before}+0 ))" \
        > "$WORK/$name-$round.ticks"
    if [ "$hooked" = yes ]; then
        local sent
        sent=$(PGOPTIONS="-c client_min_messages=warning" psql -qtA -d "$DATABASE_URL" -c "select count(*) filter (where state = 'delivered') || ' of ' || count(*) from webhook_deliveries")
        log "deliveries delivered at the end of the run: $sent"
        echo "$sent" > "$WORK/$name-$round.deliveries"
    fi
    stop_server
}

# ORDER: the configurations' order within a round.
ORDER=${ORDER:-none hooked kept}
for round in $(seq "$ROUNDS"); do
    for name in $ORDER; do
        case $name in
            none) run none "$round" true no ;;
            hooked) run hooked "$round" true yes ;;
            kept) run kept "$round" false no ;;
        esac
    done
done

python3 - "$WORK" "$ROUNDS" "$TICKS" <<'PY'
import json, os, sys
work, rounds, ticks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(f"\n{'round':5} {'configuration':13} {'jobs/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} {'vs none':>8} {'server µs/job':>14} {'postgres µs/job':>16}")
for r in range(1, rounds + 1):
    base = json.load(open(f"{work}/none-{r}.json"))["throughput"]
    for name in ("none", "hooked", "kept"):
        report = json.load(open(f"{work}/{name}-{r}.json"))
        server, postgres = (int(t) for t in open(f"{work}/{name}-{r}.ticks").read().split())
        per_job = lambda t: t / ticks * 1e6 / max(report["ok"], 1)
        extra = ""
        if os.path.exists(f"{work}/{name}-{r}.deliveries"):
            extra = "  deliveries delivered: " + open(f"{work}/{name}-{r}.deliveries").read().strip()
        print(f"{r:5} {name:13} {report['throughput']:>8,.0f} {report['p50_ms']:>8.2f} {report['p99_ms']:>8.2f} {report['errors']:>6} "
              f"{report['throughput'] / base:>8.3f} {per_job(server):>14,.0f} {per_job(postgres):>16,.0f}{extra}")
PY
