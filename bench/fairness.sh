#!/usr/bin/env bash
# Fairness between owners, and what it costs a single owner:
#   backlog: owner `bench` has BACKLOG queued jobs (made by `onejob bench
#   create` against an API-only server); then a full server starts and
#   owner `b` creates B_JOBS jobs at once. Prints b's create -> succeeded
#   times (p50, p99) and how many of the backlog's jobs were still open
#   when b's last job succeeded.
#   e2e: single-owner `onejob bench e2e` for E2E_DURATION s, RUNS times, on
#   an empty database each time.
#
#   bench/fairness.sh postgres
#   BACKLOG=20000 B_JOBS=20 E2E_DURATION=10 RUNS=2 bench/fairness.sh sqlite
source "$(dirname "$0")/lib.sh"
BACKEND=${1:-postgres}
export BACKEND
BACKLOG=${BACKLOG:-20000}
B_JOBS=${B_JOBS:-20}
E2E_DURATION=${E2E_DURATION:-10}
RUNS=${RUNS:-2}

build
start_backend
write_config
sed -i "s/^concurrency = .*/concurrency = 2048/" "$WORK/bench.toml"

# count QUERY: one number from the database.
count() {
    if [ "$BACKEND" = sqlite ]; then
        python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "${DATABASE_URL#sqlite://}" "$1"
    else
        psql -qAt -d "$DATABASE_URL" -c "$1"
    fi
}

new_database onejob_bench_fairness
B_TOKEN=$("$BIN" keys create --owner b --config "$WORK/bench.toml" 2>/dev/null | tail -n 1)
start_server --no-worker
log "$BACKEND: owner bench's backlog of $BACKLOG queued jobs"
while [ "$(count "select count(*) from jobs")" -lt "$BACKLOG" ]; do
    bench create --connections "$CONNECTIONS" --duration 2 > /dev/null
done
stop_server
start_server
log "$BACKEND: owner b's $B_JOBS jobs behind it"
python3 - "$PORT" "$B_TOKEN" "$B_JOBS" > "$WORK/behind.json" <<'PY'
import concurrent.futures, json, sys, time, urllib.request
port, token, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def call(method, path, body=None, key=None):
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=130) as answer:
        return json.load(answer)
def one(i):
    began = time.monotonic()
    job = call("POST", "/jobs", {"task": "summarize", "input": {"text": f"b {i}"}}, key=f"b-{i}-{time.time()}")
    while job["state"] != "succeeded":
        job = call("GET", f"/jobs/{job['id']}?wait=10")
    return (time.monotonic() - began) * 1000
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    took = sorted(pool.map(one, range(jobs)))
def quantile(q):
    return took[min(len(took) - 1, int(q * len(took)))]
print(json.dumps({"jobs": jobs, "p50_ms": quantile(0.5), "p99_ms": quantile(0.99), "max_ms": took[-1]}))
PY
OPEN=$(count "select count(*) from jobs where owner_id = 'bench' and state in ('queued', 'running')")
stop_server

for run in $(seq "$RUNS"); do
    new_database "onejob_bench_fairness_e2e_$run"
    start_server
    log "$BACKEND: single-owner onejob bench e2e, $CONNECTIONS connections, $E2E_DURATION s (run $run)"
    bench e2e --connections "$CONNECTIONS" --duration "$E2E_DURATION" > "$WORK/e2e-$run.json"
    stop_server
done

python3 - "$WORK" "$BACKEND" "$BACKLOG" "$RUNS" "$OPEN" <<'PY'
import json, sys
work, backend, backlog, runs, still_open = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
b = json.load(open(f"{work}/behind.json"))
print(f"\n{backend}: owner b's {b['jobs']} jobs behind a backlog of {backlog}")
print(f"  create -> succeeded: p50 {b['p50_ms']:.0f} ms, p99 {b['p99_ms']:.0f} ms, max {b['max_ms']:.0f} ms")
print(f"  backlog jobs still open when b's last job succeeded: {still_open}")
for run in range(1, runs + 1):
    e = json.load(open(f"{work}/e2e-{run}.json"))
    print(f"single-owner e2e run {run}: {e['throughput']:.0f} jobs/s, p99 {e['p99_ms']:.0f} ms, errors {e['errors']}")
PY
