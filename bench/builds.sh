#!/usr/bin/env bash
# e2e of two builds of onejob in turns (A B B A, ROUNDS times), each run on
# a new database made and migrated by its own build, with its own default
# configuration: whether a change costs the core path anything beyond the
# spread between runs. Per job: the CPU of the server and of Postgres, and
# on the throwaway Postgres what the run wrote (lib.sh's wal_written and
# wal_by_relation): WAL bytes, index entries, row updates and the HOT
# share of them.
#
#   BIN_A=/path/to/the/other/onejob bench/builds.sh postgres|sqlite
#   BIN_B (default: this tree's release build), ROUNDS (2), E2E_DURATION (20)
#   SCHEMA_B: SQL run on B's databases after their migrations (Postgres),
#   to measure a schema change before it is a migration (BIN_A may then be
#   this tree's build too)
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
    if [ "$label" = A ]; then
        BIN=$BIN_A AFTER_MIGRATE_SQL=
    else
        BIN=$BIN_B AFTER_MIGRATE_SQL=${SCHEMA_B:-}
    fi
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
    local server0 pg0 lsn=
    [ "$BACKEND" = postgres ] && lsn=$(wal_mark)
    server0=$(own_ticks "$SERVER_PID"); pg0=$(postgres_ticks)
    # The load generator is B's in every run.
    "$BIN_B" bench --url "http://127.0.0.1:$PORT" --token "$TOKEN" --json e2e --connections "$CONNECTIONS" \
        --duration "$E2E_DURATION" > "$WORK/$n-$label.json" 2>/dev/null
    echo "$(( $(own_ticks "$SERVER_PID") - server0 )) $(( $(postgres_ticks) - ${pg0:-0} )) $TICKS" > "$WORK/$n-$label.cpu"
    local written="- - - - -"
    : > "$WORK/$n-$label.relations"
    if [ -n "$lsn" ]; then
        written=$(wal_written "$lsn")
        wal_by_relation "$lsn" "$WORK/$n-$label.relations"
    fi
    echo "$written" > "$WORK/$n-$label.written"
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
    jobs = max(r["ok"], 1)
    r["cpu_us"] = (1e6 * server / ticks / jobs, 1e6 * pg / ticks / jobs)
    # What the run wrote a job (on the throwaway Postgres only): WAL bytes,
    # index entries, row updates, and the HOT share of them.
    wal, _, _, index, _ = open(path[:-5] + ".written").read().split()
    relations = [line.split() for line in open(path[:-5] + ".relations")]
    updates = sum(int(fields[2]) for fields in relations)
    r["written"] = None if wal == "-" else (
        int(wal) / jobs, int(index) / jobs, updates / jobs, sum(int(fields[3]) for fields in relations) / max(updates, 1))
    runs[label].append(r)
    written = "" if r["written"] is None else (
        "  written a job: WAL {:,.0f} B, index entries {:.1f}, row updates {:.2f} ({:.0%} HOT)".format(*r["written"]))
    print(f"run {path.split('/')[-1][:-5]:>5}: {r['throughput']:8,.0f} jobs/s  p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  "
          f"errors {r['errors']}  CPU a job: server {r['cpu_us'][0]:,.0f} µs, Postgres {r['cpu_us'][1]:,.0f} µs{written}")
for label, name in (("A", a), ("B", b)):
    t = [r["throughput"] for r in runs[label]]
    print(f"{label} ({name}): median {statistics.median(t):,.0f} jobs/s, range {min(t):,.0f}-{max(t):,.0f}; "
          f"p99 median {statistics.median(r['p99_ms'] for r in runs[label]):.1f} ms; CPU a job, medians: "
          f"server {statistics.median(r['cpu_us'][0] for r in runs[label]):,.0f} µs, "
          f"Postgres {statistics.median(r['cpu_us'][1] for r in runs[label]):,.0f} µs")
    written = [r["written"] for r in runs[label] if r["written"] is not None]
    if written:
        print("  written a job, medians: WAL {:,.0f} B, index entries {:.1f}, row updates {:.2f} ({:.0%} HOT)".format(
            *(statistics.median(w[i] for w in written) for i in range(4))))
# By table and index, medians a job: rows inserted, updated, of them HOT,
# index entries; A beside B.
by = {"A": {}, "B": {}}
for path in glob.glob(f"{work}/*-[AB].relations"):
    for name, *counts in (line.split() for line in open(path)):
        by[path[-11]].setdefault(name, []).append([int(c) for c in counts] + [path[:-10] + ".json"])
if by["A"] or by["B"]:
    print(f"\nwritten a job, by table and index: inserts / updates / HOT / index entries, medians")
    print(f"{'relation':38} {'A':>24} {'B':>24}")
    def cell(label, name):
        values = by[label].get(name, [])
        if not values:
            return "-"
        jobs = lambda v: max(json.load(open(v[4]))["ok"], 1)
        return " / ".join(f"{statistics.median(v[i] / jobs(v) for v in values):.2f}" for i in range(4))
    for name in sorted(set(by["A"]) | set(by["B"])):
        print(f"{name:38} {cell('A', name):>24} {cell('B', name):>24}")
ratio = statistics.median(r["throughput"] for r in runs["B"]) / statistics.median(r["throughput"] for r in runs["A"])
print(f"B / A, medians: {ratio:.2f}")
PY
