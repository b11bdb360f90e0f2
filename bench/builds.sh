#!/usr/bin/env bash
# e2e of two builds of onejob in turns (A B B A, ROUNDS times), each run on
# a new database made and migrated by its own build, with its own default
# configuration: whether a change costs the core path anything beyond the
# spread between runs.
#
#   BIN_A=/path/to/the/other/onejob bench/builds.sh postgres|sqlite
#   BIN_B (default: this tree's release build), ROUNDS (2), E2E_DURATION (20)
[ -n "${BIN_A:-}" ] || { echo "BIN_A names the build to compare with" >&2; exit 2; }
# Named relative to where the script was started from.
BIN_A=$(realpath "$BIN_A")
[ -n "${BIN_B:-}" ] && BIN_B=$(realpath "$BIN_B")
source "$(dirname "$0")/lib.sh"
BACKEND=${1:-postgres}
export BACKEND
ROUNDS=${ROUNDS:-2}
E2E_DURATION=${E2E_DURATION:-20}
build
BIN_B=${BIN_B:-$BIN}

start_backend
# one LABEL: an e2e run of build LABEL (A or B).
one() {
    local label=$1 n=$2
    if [ "$label" = A ]; then BIN=$BIN_A; else BIN=$BIN_B; fi
    write_config
    new_database "onejob_bench_builds_$n"
    start_server
    # Warmed up with e2e itself: creates alone would leave a backlog that
    # the measured run's jobs wait behind.
    log "warming up: onejob bench e2e for $WARMUP s, not measured"
    "$BIN_B" bench --url "http://127.0.0.1:$PORT" --token "$TOKEN" --json e2e --connections "$CONNECTIONS" \
        --duration "$WARMUP" > /dev/null 2>&1
    analyze_tables
    log "$BACKEND: build $label, onejob bench e2e, $CONNECTIONS connections, $E2E_DURATION s"
    local server0 pg0
    server0=$(own_ticks "$SERVER_PID"); pg0=$(postgres_ticks)
    # The load generator is B's in every run.
    "$BIN_B" bench --url "http://127.0.0.1:$PORT" --token "$TOKEN" --json e2e --connections "$CONNECTIONS" \
        --duration "$E2E_DURATION" > "$WORK/$n-$label.json" 2>/dev/null
    echo "$(( $(own_ticks "$SERVER_PID") - server0 )) $(( $(postgres_ticks) - ${pg0:-0} )) $TICKS" > "$WORK/$n-$label.cpu"
    stop_server
}
n=0
for _ in $(seq "$ROUNDS"); do
    for label in A B B A; do
        n=$((n + 1))
        one "$label" "$n"
    done
done

python3 - "$WORK" "$BIN_A" "$BIN_B" <<'PY'
import glob, json, statistics, sys
work, a, b = sys.argv[1:]
runs = {"A": [], "B": []}
for path in sorted(glob.glob(f"{work}/*-[AB].json"), key=lambda p: int(p.split("/")[-1].split("-")[0])):
    label = path[-6]
    r = json.load(open(path))
    server, pg, ticks = map(int, open(path[:-5] + ".cpu").read().split())
    # CPU per job, microseconds: the server's, and Postgres's (0 for SQLite, or a Postgres not ours).
    r["cpu_us"] = (1e6 * server / ticks / max(r["ok"], 1), 1e6 * pg / ticks / max(r["ok"], 1))
    runs[label].append(r)
    print(f"run {path.split('/')[-1][:-5]:>5}: {r['throughput']:8,.0f} jobs/s  p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  "
          f"errors {r['errors']}  CPU a job: server {r['cpu_us'][0]:,.0f} µs, Postgres {r['cpu_us'][1]:,.0f} µs")
for label, name in (("A", a), ("B", b)):
    t = [r["throughput"] for r in runs[label]]
    print(f"{label} ({name}): median {statistics.median(t):,.0f} jobs/s, range {min(t):,.0f}-{max(t):,.0f}; "
          f"p99 median {statistics.median(r['p99_ms'] for r in runs[label]):.1f} ms; CPU a job, medians: "
          f"server {statistics.median(r['cpu_us'][0] for r in runs[label]):,.0f} µs, "
          f"Postgres {statistics.median(r['cpu_us'][1] for r in runs[label]):,.0f} µs")
ratio = statistics.median(r["throughput"] for r in runs["B"]) / statistics.median(r["throughput"] for r in runs["A"])
print(f"B / A, medians: {ratio:.2f}")
PY
