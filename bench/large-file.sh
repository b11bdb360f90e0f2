#!/usr/bin/env bash
# A large output file, served by URL: a real Cog server (the environment
# .ci/run makes at target/cog-venv, running tests/cog/predict.py) started
# with --upload-url puts a PNG of about SIZE_MB megabytes (uncompressed
# pixels) on a local store, and its output is that URL; onejob fetches it
# into its blob store, streamed. It reports the fetch's time and the
# server's resident memory before and at its peak, so that a file held
# whole would show as its size. On SQLite, the server's only load.
#
#   SIZE_MB=200 bench/large-file.sh
source "$(dirname "$0")/lib.sh"
BACKEND=sqlite
export BACKEND
SIZE_MB=${SIZE_MB:-200}
COG_PORT=${COG_PORT:-19095}
STORE_PORT=${STORE_PORT:-19096}
VENV=$PWD/target/cog-venv
[ -x "$VENV/bin/python" ] || { echo "$VENV is missing: .ci/run makes it" >&2; exit 1; }

build

# The store: every PUT written to a file, every GET streamed back.
mkdir -p "$WORK/store"
python3 - "$STORE_PORT" "$WORK/store" <<'PY' &
import http.server, os, shutil, sys
port, root = int(sys.argv[1]), sys.argv[2]
class Store(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def path_of(self):
        return os.path.join(root, os.path.basename(self.path))
    def do_PUT(self):
        left = int(self.headers.get("content-length", 0))
        with open(self.path_of(), "wb") as out:
            while left:
                chunk = self.rfile.read(min(left, 1 << 20))
                out.write(chunk)
                left -= len(chunk)
        self.send_response(201)
        self.send_header("content-length", "0")
        self.end_headers()
    def do_GET(self):
        path = self.path_of()
        self.send_response(200)
        self.send_header("content-type", "image/png")
        self.send_header("content-length", str(os.path.getsize(path)))
        self.end_headers()
        with open(path, "rb") as source:
            shutil.copyfileobj(source, self.wfile, 1 << 20)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Store).serve_forever()
PY
STORE_PID=$!
(cd tests/cog && PATH="$VENV/bin:$PATH" PORT=$COG_PORT COG_PREDICT_TYPE_STUB=predict.py:Predictor PYTHONWARNINGS=ignore \
    exec "$VENV/bin/python" -m cog.server.http --host 127.0.0.1 --upload-url "http://127.0.0.1:$STORE_PORT/upload/" \
    >"$WORK/cog.log" 2>&1) &
COG_PID=$!
# The Cog server's own worker process goes with it; cleanup sees the
# script's own status.
trap 'rc=$?; pkill -P $COG_PID 2>/dev/null; kill $STORE_PID $COG_PID 2>/dev/null; wait $STORE_PID $COG_PID 2>/dev/null; (exit $rc); cleanup' EXIT
ready=
for _ in $(seq 300); do
    if curl -sf "http://127.0.0.1:$COG_PORT/health-check" | grep -q READY; then ready=1; break; fi
    sleep 0.1
done
[ -n "$ready" ] || { cat "$WORK/cog.log" >&2; echo "the Cog server did not become ready" >&2; exit 1; }

# A side of SIZE_MB megabytes of RGB pixels.
SIDE=$(python3 -c "import math; print(int(math.sqrt($SIZE_MB * 1e6 / 3)))")
write_config "$(cat <<TOML
[tasks.large]
default_provider = "cog-large"
max_attempts = 1
input_schema = '{ "type": "object" }'
output_schema = '{ "type": "string" }'

[tasks.large.files]
types = ["image/png"]
max_bytes = 1000000000

[providers.cog-large]
kind = "cog"
base_url = "http://127.0.0.1:$COG_PORT"
timeout_ms = 600000
TOML
)"
sed -i '/^\[files\]$/a allow_hosts = ["127.0.0.1"]' "$WORK/bench.toml"
new_database onejob_large
start_server
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status"; }
peak() { awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status"; }
before=$(rss)
log "a PNG of $SIDE × $SIDE (about $SIZE_MB MB), by URL; the server's RSS before: $((before / 1024)) MiB"
started=$(date +%s.%N)
id=$(curl -sf "http://127.0.0.1:$PORT/jobs" -H "Authorization: Bearer $TOKEN" -H 'Idempotency-Key: large-1' \
    -H 'Content-Type: application/json' -d "{\"task\": \"large\", \"input\": {\"tag\": \"large\", \"seconds\": 0, \"size\": $SIDE, \"raw\": true}}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
while :; do
    job=$(curl -sf "http://127.0.0.1:$PORT/jobs/$id?wait=30" -H "Authorization: Bearer $TOKEN")
    state=$(printf '%s' "$job" | python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])')
    [ "$state" = queued ] || [ "$state" = running ] || break
done
ended=$(date +%s.%N)
[ "$state" = succeeded ] || { echo "the job ended $state: $job" >&2; exit 1; }
size=$(printf '%s' "$job" | python3 -c 'import json, sys; print(json.load(sys.stdin)["result"]["size"])')
log "kept $((size / 1000000)) MB in $(python3 -c "print(round($ended - $started, 2))") s (drawing, upload and fetch); the server's RSS after: $(($(rss) / 1024)) MiB, at its peak: $(($(peak) / 1024)) MiB"
