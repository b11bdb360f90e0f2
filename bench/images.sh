#!/usr/bin/env bash
# Images through onejob: `picture` jobs on a provider that speaks Cog's
# predictions (the simulator's, `onejob sim` in a process of its own on
# SIM_PORT, 19090), each drawing a PNG of SIDE pixels a side after
# LATENCY_MS and calling onejob back with it inline. With API=replicate,
# the simulator's Replicate API instead (signed webhooks), with API=fal or
# API=runpod its job APIs, spoken by the job tables docs/providers.md gives
# (with DROP_WEBHOOKS=true no webhook, so that each prediction is settled
# by asking for it every POLL_MS). IMAGES jobs, CALLERS at a time, then every kept
# file read back the same way. It reports:
#   - settlement: from the simulator's completion of a prediction (its
#     request log's finished_at) to the attempt's settlement by the webhook
#     or the lookup (its finished_at), the file kept included;
#   - create → settled, as a caller sees it (the provider's latency in it);
#   - reading the kept files: MB/s, and each read's p50 / p99;
#   - the server's peak RSS.
#
#   bench/images.sh [postgres|sqlite]
#   IMAGES=200 CALLERS=32 SIDE=512 LATENCY_MS=500 bench/images.sh postgres
#   API=replicate DROP_WEBHOOKS=true POLL_MS=1000 bench/images.sh postgres
#   API=fal bench/images.sh postgres
source "$(dirname "$0")/lib.sh"
BACKEND=${1:-postgres}
export BACKEND
IMAGES=${IMAGES:-200}
CALLERS=${CALLERS:-32}
SIDE=${SIDE:-512}
LATENCY_MS=${LATENCY_MS:-500}
API=${API:-predictions}
DROP_WEBHOOKS=${DROP_WEBHOOKS:-false}
POLL_MS=${POLL_MS:-1000}
JOB_TABLE=
case "$API" in
    predictions) OUTPUT='{ "type": "string" }' ;;
    replicate) OUTPUT='{ "type": "array", "items": { "type": "string" } }' ;;
    fal | runpod)
        OUTPUT='{ "type": "object", "required": ["images"] }'
        # The documented configuration's job table, as the simulator's
        # provider's (fal's is the first TOML block of the section, RunPod's
        # the second).
        JOB_TABLE=$(python3 - "$API" "$(dirname "$0")/../docs/providers.md" <<'PY'
import re, sys
api, path = sys.argv[1:]
section = open(path).read().split("\n## fal, RunPod and other job APIs\n")[1]
block = section.split("```toml\n")[1 if api == "fal" else 2].split("```")[0]
table = block[block.index("[providers."):]
table = table[table.index("\n[providers.") + 1:table.index("\n[tasks.")]
print(re.sub(r"\[providers\.[a-z]+\.job", "[providers.sim-picture.job", table))
PY
        )
        ;;
    *) echo "API is predictions, replicate, fal or runpod" >&2; exit 2 ;;
esac

build
[ "$BACKEND" = postgres ] && start_postgres

write_config "$(cat <<TOML
[tasks.picture]
default_provider = "sim-picture"
max_attempts = 1
input_schema = '{ "type": "object" }'
output_schema = '$OUTPUT'

[tasks.picture.files]
types = ["image/png"]
max_bytes = 16000000

[providers.sim-picture]
kind = "sim"
api = "$API"
model = "bench/painter"
timeout_ms = 60000
latency_ms = $LATENCY_MS
poll_interval_ms = $POLL_MS
drop_webhooks = $DROP_WEBHOOKS

$JOB_TABLE
TOML
)"
start_sim "$WORK/bench.toml"
SIM_URL=http://127.0.0.1:${SIM_PORT:-19090}
export ONEJOB_SIM_URL=$SIM_URL
new_database onejob_images
start_server

log "$IMAGES pictures of $SIDE × $SIDE, $CALLERS at a time, on $BACKEND, $API (webhooks dropped: $DROP_WEBHOOKS)"
python3 - "http://127.0.0.1:$PORT" "$TOKEN" "$SIM_URL" "$IMAGES" "$CALLERS" "$SIDE" "$SERVER_PID" "$API" "$DROP_WEBHOOKS" <<'PY'
import concurrent.futures, datetime, json, sys, time, urllib.request

api, token, sim, images, callers, side, pid, surface, dropped = sys.argv[1:]
images, callers, side = int(images), int(callers), int(side)
auth = {"Authorization": f"Bearer {token}"}

def call(method, url, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={**auth, **(headers or {})})
    if data:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=120) as answer:
        return answer.read()

def stamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

def peak_rss_mib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0

def one(n):
    started = time.monotonic()
    made = json.loads(call("POST", f"{api}/jobs", {"task": "picture", "input": {"prompt": f"picture {n}", "size": side}},
                           {"Idempotency-Key": f"picture-{n}"}))
    job = made
    while job["state"] in ("queued", "running"):
        job = json.loads(call("GET", f"{api}/jobs/{made['id']}?wait=30"))
    return job, time.monotonic() - started

def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")

began = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(callers) as pool:
    done = list(pool.map(one, range(images)))
made_in = time.monotonic() - began
failed = [job for job, _ in done if job["state"] != "succeeded"]
if failed:
    sys.exit(f"{len(failed)} jobs did not succeed, the first: {json.dumps(failed[0])[:400]}")
log = {r["id"]: r for r in json.loads(call("GET", f"{sim}/v1/requests"))["requests"]}
# The simulator logs a Cog prediction by the attempt's id, the hosted
# APIs' by their own, which the attempt keeps.
key = "id" if surface == "predictions" else "provider_request_id"
settle = []
for job, _ in done:
    attempt = job["attempts"][0]
    request = log[attempt[key]]
    settle.append((stamp(attempt["finished_at"]) - stamp(request["finished_at"])) * 1000)
whole = [seconds * 1000 for _, seconds in done]
pictures = [r for r in log.values() if r["provider"] == "sim-picture"]
if len(pictures) != images or any(r["received"] != 1 for r in pictures):
    sys.exit(f"{len(pictures)} predictions for {images} jobs, or one sent twice")

def read(job):
    started = time.monotonic()
    file = {"replicate": lambda r: r[0], "fal": lambda r: r["images"][0]["url"],
            "runpod": lambda r: r["images"][0]}.get(surface, lambda r: r)(job["result"])
    size = len(call("GET", api + file["url"]))
    return size, time.monotonic() - started

began = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(callers) as pool:
    reads = list(pool.map(read, [job for job, _ in done]))
read_in = time.monotonic() - began
total = sum(size for size, _ in reads)
by = "lookup" if dropped == "true" else "webhook"
print(f"settlement by {by} after the provider's completion: p50 {pct(settle, 50):.1f} ms, p99 {pct(settle, 99):.1f} ms")
print(f"create → settled: p50 {pct(whole, 50):.0f} ms, p99 {pct(whole, 99):.0f} ms; {images / made_in:.1f} jobs/s")
print(f"files read: {total / 1e6:.1f} MB in {read_in:.2f} s, {total / 1e6 / read_in:.1f} MB/s; each p50 "
      f"{pct([s * 1000 for _, s in reads], 50):.1f} ms, p99 {pct([s * 1000 for _, s in reads], 99):.1f} ms")
print(f"server's peak RSS: {peak_rss_mib():.0f} MiB")
PY
