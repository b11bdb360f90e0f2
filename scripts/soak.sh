#!/usr/bin/env bash
# A soak run (CI runs a short one): one full onejob server (API and worker;
# the simulated provider in a process of its own, `onejob sim`) under
# end-to-end load at about half its measured capacity for DURATION seconds,
# sampling every INTERVAL seconds the server's resident memory, its open
# file descriptors, its Postgres connections and the queue depth (attempts
# pending). At the end: a table of each series and whether it stayed flat;
# exit status 1 when one grew, a sample could not be read, or the load saw
# errors or did not run (below).
#
#   scripts/soak.sh                      # 30 minutes on a throwaway Postgres (or DATABASE_URL)
#   DURATION=120 INTERVAL=5 scripts/soak.sh
#   scripts/soak.sh sqlite               # a SQLite file (no connections series)
#   ONEJOB_BIN=target/debug/onejob ...   # use that binary instead of building a release one
#   SETTINGS="replay_cache_keys=2000" ...  # change settings of the server's configuration
#   SIM_APART=0 ...                        # the simulated provider in the server (by default in a process of its own)
#
# Flat means: the mean of the last third of the samples is within a small
# absolute slack of the mean of the middle third (resident memory: 1 MiB,
# or 0.5 % when that is more; so that a leak of 100 bytes a job, about
# 2 MiB between the two in a 150-second run at 370 jobs a second, fails).
# The first third is warm-up: bounded caches (the replay cache, the
# simulator's memory of requests) fill up then, and a cache filling up is
# not growth. It also fails when a sample of a series is missing (a failed
# `psql` or scrape: a series that cannot be read is not flat), when there
# are fewer than 6 samples, and when the load did not run: fewer than
# MIN_JOBS jobs (20 a second of DURATION by default), or fewer a second than
# a quarter of the rate it was set to reach.
source "$(dirname "$0")/../bench/lib.sh"
BACKEND=${1:-postgres}
DURATION=${DURATION:-1800}
INTERVAL=${INTERVAL:-10}
PORT=${PORT:-18180}
SCENARIO=${SCENARIO:-e2e}

build
case "$BACKEND" in
    postgres) start_postgres ;;
    sqlite) ;;
    *) echo "usage: $0 postgres|sqlite" >&2; exit 2 ;;
esac
write_config
# SETTINGS: `name=value` pairs, each replacing the line `name = ...` of the
# configuration (names as `onejob config print-default` shows them).
for setting in ${SETTINGS:-}; do
    name=${setting%%=*}
    grep -q "^$name = " "$WORK/bench.toml" || { echo "no setting $name" >&2; exit 2; }
    sed -i "s|^$name = .*|$name = ${setting#*=}|" "$WORK/bench.toml"
done
# SIM_APART=1 (the default): the server's memory is onejob's alone. The
# simulator's grows with the run: it remembers every request id it saw (a
# hash each, 10 to 20 bytes, up to 3,500,000 ids), so that an attempt sent
# twice is caught however long ago its first send was; in the server's
# process (SIM_APART=0) that alone fails a long run's memory check.
if [ "${SIM_APART:-1}" = 1 ]; then
    start_sim_apart sim-fast
    export ONEJOB_BENCH_SIM_KEY=bench
fi
new_database onejob_soak
start_server

# Capacity: the throughput at 64 connections. Half of it: the fewest
# connections (doubling from 1) whose throughput reaches half, or the one
# below it when that is nearer.
log "measuring capacity: $SCENARIO, 64 connections, 5 s"
bench "$SCENARIO" --connections 64 --duration 5 > "$WORK/capacity.json"
CAPACITY=$(field "$WORK/capacity.json" throughput)
TARGET=$(python3 -c "print($CAPACITY / 2)")
CONNS=1
PREVIOUS=0
while :; do
    bench "$SCENARIO" --connections "$CONNS" --duration 3 > "$WORK/probe.json"
    GOT=$(field "$WORK/probe.json" throughput)
    log "$CONNS connections: $GOT /s (target $TARGET /s)"
    if python3 -c "import sys; sys.exit(0 if $GOT >= $TARGET else 1)" || [ "$CONNS" -ge 64 ]; then
        if python3 -c "import sys; sys.exit(0 if abs($PREVIOUS - $TARGET) < abs($GOT - $TARGET) else 1)"; then
            CONNS=$((CONNS / 2))
        fi
        break
    fi
    PREVIOUS=$GOT
    CONNS=$((CONNS * 2))
done
log "capacity $CAPACITY /s; soaking at $CONNS connections for $DURATION s, a sample every $INTERVAL s"

# The load, in chunks of at most a minute, each with its own report.
END=$(($(date +%s) + DURATION))
(
    CHUNKS=0
    while [ "$(date +%s)" -lt "$END" ]; do
        LEFT=$((END - $(date +%s)))
        CHUNK=$((LEFT < 60 ? LEFT : 60))
        [ "$CHUNK" -ge 1 ] || break
        CHUNKS=$((CHUNKS + 1))
        bench "$SCENARIO" --connections "$CONNS" --duration "$CHUNK" > "$WORK/load-$CHUNKS.json" || true
    done
) &
LOAD_PID=$!

metric() {
    curl -s "http://127.0.0.1:$PORT/metrics" | awk -v name="$1" '$1 == name { value = $2 } END { print value }' || true
}

printf 'seconds,rss_kib,fds,pg_connections,queue_depth\n' > "$WORK/samples.csv"
START=$(date +%s)
while [ "$(date +%s)" -lt "$END" ]; do
    sleep "$INTERVAL"
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        log "the server died"; cat "$WORK/server.log" >&2; exit 1
    fi
    RSS=$(awk '/^VmRSS/ { print $2 }' "/proc/$SERVER_PID/status")
    FDS=$(find "/proc/$SERVER_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
    if [ "$BACKEND" = postgres ]; then
        PGCONN=$(psql -Atq "$DATABASE_URL" -c "select count(*) from pg_stat_activity where application_name = 'onejob'" || true)
    else
        PGCONN=
    fi
    DEPTH=$(metric onejob_queue_depth)
    printf '%s,%s,%s,%s,%s\n' $(($(date +%s) - START)) "$RSS" "$FDS" "$PGCONN" "$DEPTH" | tee -a "$WORK/samples.csv" >&2
done
wait "$LOAD_PID"
# Statements the server logged as slow, by what they were.
log "slow statements in the server's log: $(grep -c "slow statement" "$WORK/server.log" || true)"
grep "slow statement" "$WORK/server.log" | grep -o 'summary="[^"]*"' | sort | uniq -c | sort -rn | head -n 5 >&2 || true

python3 - "$WORK" "$BACKEND" "$CAPACITY" "$CONNS" "$SCENARIO" "$TARGET" "${MIN_JOBS:-$((DURATION * 20))}" <<'PY'
import csv, glob, json, sys
work, backend, capacity, conns, scenario, target, min_jobs = sys.argv[1:8]
rows = list(csv.DictReader(open(f"{work}/samples.csv")))
reports, broken = [], []
for path in sorted(glob.glob(f"{work}/load-*.json")):
    try:
        reports.append(json.load(open(path)))
    except ValueError:
        broken.append(path.rsplit("/", 1)[-1])
ok = sum(r["ok"] for r in reports)
errors = sum(r["errors"] for r in reports)
seconds = sum(r["seconds"] for r in reports) or 1
problems = []
if broken:
    problems.append(f"load chunks without a report (the bench failed): {', '.join(broken)}")
if ok < int(min_jobs):
    problems.append(f"the load ran {ok:,} jobs, fewer than {int(min_jobs):,}")
if ok / seconds < float(target) / 4:
    problems.append(f"the load ran {ok / seconds:,.0f} jobs a second, under a quarter of its target {float(target):,.0f}")
if len(rows) < 6:
    problems.append(f"{len(rows)} samples, fewer than 6")
p99 = max((r["p99_ms"] for r in reports), default=0)
print(f"\nsoak on {backend}: {scenario} at {conns} connections (capacity {float(capacity):,.0f} /s), "
      f"{len(rows)} samples over {rows[-1]['seconds'] if rows else 0} s")
print(f"load: {ok:,} ok ({ok / seconds:,.0f} /s), {errors} errors, worst chunk p99 {p99:.1f} ms\n")
# series: (column, label, absolute slack, relative slack); SQLite has no
# connections series.
series = [("rss_kib", "RSS KiB", 1024, 0.005), ("fds", "open fds", 10, 0), ("queue_depth", "queue depth", 50, 0)]
if backend == "postgres":
    series.insert(2, ("pg_connections", "Postgres connections", 2, 0))
print(f"{'series':22} {'first':>10} {'min':>10} {'max':>10} {'last':>10} {'middle mean':>11} {'late mean':>10}  verdict")
grown = []
for column, label, slack, share in series:
    values = [float(r[column]) for r in rows if r[column] not in ("", None)]
    if len(values) < len(rows) or not values:
        problems.append(f"{label}: {len(rows) - len(values)} of {len(rows)} samples missing")
        print(f"{label:22} {'n/a':>10}")
        continue
    third = max(1, len(values) // 3)
    middle = values[third:2 * third] or values
    late = values[-third:]
    early, late = sum(middle) / len(middle), sum(late) / len(late)
    flat = late <= early + max(slack, early * share)
    if not flat:
        grown.append(label)
    print(f"{label:22} {values[0]:>10,.0f} {min(values):>10,.0f} {max(values):>10,.0f} {values[-1]:>10,.0f} "
          f"{early:>11,.0f} {late:>10,.0f}  {'flat' if flat else 'GREW'}")
if errors:
    print(f"\nthe load saw {errors} errors")
if grown:
    print(f"\nnot flat: {', '.join(grown)}")
for problem in problems:
    print(f"\nFAILED: {problem}")
sys.exit(1 if grown or errors or problems else 0)
PY
