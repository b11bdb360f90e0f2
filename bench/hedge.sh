#!/usr/bin/env bash
# Hedging the latency tail, on one backend: `onejob bench e2e` (create a
# `summarize` job on sim-fast, long-poll it until it succeeded) for
# E2E_DURATION (60) s on CONNECTIONS (64) loops, twice on new databases, with
# sim-fast answering in 20-40 ms but TAIL_RATE (0.05) of its calls in
# TAIL_MS (4,000) ms:
#   unhedged: the task as it is;
#   hedged:   [tasks.summarize.hedge] after_ms = AFTER_MS (200) to
#             sim-second (the same simulator, qualified at start).
# Reported for each: jobs, p50, p99 and p99.9 of create -> succeeded, the
# share of jobs hedged, the provider cost a job (GET /usage), and the
# hedged run's extra cost against the unhedged one.
# Then what a lost hedge costs: sim-fast without its tail, for COST_S (20)
# s unhedged and with every job hedged after 5 ms (max_share 1.0), the CPU
# and WAL a job of each, and their difference over the share hedged.
# Then a provider down: sim-fast (20-40 ms, no tail) answers every call
# with a 500 for its first OUTAGE_S (30) s, the jobs' failover going to
# sim-second; `bench e2e` for OUTAGE_S s without a breaker and with
# [providers.sim-fast.breaker] (half of 10 calls in 10 s, 5 s cool-down).
#
# Exit status 1 when a target is missed (the hedged p99 at most a tenth of
# the unhedged one, a hedged job's extra cost at most 10 %), when the hedged
# run hedged no job or lost every hedge, or when a run saw errors or ran
# no job (the outage's jobs fail over: none fails).
#
#   bench/hedge.sh postgres|sqlite
#   E2E_DURATION=60 CONNECTIONS=64 TAIL_RATE=0.05 TAIL_MS=4000 AFTER_MS=200 OUTAGE_S=30 bench/hedge.sh postgres
source "$(dirname "$0")/lib.sh"
BACKEND=${1:-postgres}
export BACKEND
E2E_DURATION=${E2E_DURATION:-60}
TAIL_RATE=${TAIL_RATE:-0.05}
TAIL_MS=${TAIL_MS:-4000}
AFTER_MS=${AFTER_MS:-200}
OUTAGE_S=${OUTAGE_S:-30}
COST_S=${COST_S:-20}

build
start_backend
write_config "$(sim_provider sim-second 'latency_ms = 20
jitter_ms = 20
qualify_on_start = true
price = { input_per_million = "0.15", output_per_million = "0.60", currency = "USD" }')"
# sim-fast: 20-40 ms, but its tail. The simulator's tail is exact: one
# call in 1/TAIL_RATE, spread evenly.
python3 - "$WORK/bench.toml" "$TAIL_RATE" "$TAIL_MS" <<'PY'
import re, sys
path, rate, tail = sys.argv[1:]
text = open(path).read()
start = text.index("[providers.sim-fast]")
end = text.find("\n[", start)
block = re.sub(r"(?m)^(latency_ms|jitter_ms|tail_rate|tail_latency_ms|timeout_ms) = .*\n?", "", text[start:end]).rstrip("\n")
block += f"\nlatency_ms = 20\njitter_ms = 20\ntail_rate = {rate}\ntail_latency_ms = {tail}\ntimeout_ms = {int(tail) * 3}"
open(path, "w").write(text[:start] + block + text[end:])
PY
sed -i 's/^failover = \["sim-slow"\]$/failover = ["sim-second"]/' "$WORK/bench.toml"
cp "$WORK/bench.toml" "$WORK/unhedged.toml"
printf '\n[tasks.summarize.hedge]\nafter_ms = %s\nproviders = ["sim-second"]\nmax_share = 0.2\n' "$AFTER_MS" >> "$WORK/bench.toml"
cp "$WORK/bench.toml" "$WORK/hedged.toml"
# What a lost hedge costs: no tail, and every job hedged (after 5 ms, when
# no call has answered yet), against the same without hedging.
sed -e "s/^tail_rate = .*/tail_rate = 0/" "$WORK/unhedged.toml" > "$WORK/plain.toml"
cp "$WORK/plain.toml" "$WORK/always.toml"
printf '\n[tasks.summarize.hedge]\nafter_ms = 5\nproviders = ["sim-second"]\nmax_share = 1.0\n' >> "$WORK/always.toml"
# The outage: no tail, every call failing for OUTAGE_S s from the start.
sed -e "s/^tail_rate = .*/tail_rate = 0/" -e "s/^tail_latency_ms = .*/outage_ms = $(( OUTAGE_S * 1000 ))/" \
    "$WORK/unhedged.toml" > "$WORK/unbroken.toml"
sed 's/^\[providers.sim-fast\]$/[providers.sim-fast]\nbreaker = { failure_rate = 0.5, min_calls = 10, window_ms = 10000, cool_down_ms = 5000 }/' \
    "$WORK/unbroken.toml" > "$WORK/breaker.toml"

sql() {
    if [ "$BACKEND" = postgres ]; then
        psql -qAt -d "$DATABASE_URL" -c "$1"
    else
        python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' \
            "${DATABASE_URL#sqlite://}" "$1"
    fi
}

# run NAME: one e2e run with NAME.toml on a new database; NAME.json the
# bench's report, NAME.facts the jobs, hedged jobs and cost.
run() {
    local name=$1
    cp "$WORK/$name.toml" "$WORK/bench.toml"
    new_database "onejob_bench_$name"
    start_server
    log "$BACKEND, $name: onejob bench e2e, $CONNECTIONS loops, ${2:-$E2E_DURATION} s"
    local pg0 server0 wal0=0
    [ "$BACKEND" = postgres ] && wal0=$(sql "select pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
    pg0=$(postgres_ticks); server0=$(own_ticks "$SERVER_PID")
    bench e2e --connections "$CONNECTIONS" --duration "${2:-$E2E_DURATION}" > "$WORK/$name.json"
    # The losers still running are canceled within a moment of their job's end.
    sleep 1
    local wal=0
    [ "$BACKEND" = postgres ] && wal=$(( $(sql "select pg_current_wal_insert_lsn() - '0/0'::pg_lsn") - wal0 ))
    echo "$(( $(postgres_ticks) - ${pg0:-0} )) $(( $(own_ticks "$SERVER_PID") - server0 )) $wal" > "$WORK/$name.cpu"
    local usage
    usage=$(python3 -c 'import sys, urllib.request as r
print(r.urlopen(r.Request(sys.argv[1], headers={"authorization": "Bearer " + sys.argv[2]})).read().decode())' \
        "http://127.0.0.1:$PORT/usage" "$TOKEN")
    echo "$(sql "select count(*) from jobs") $(sql "select count(distinct job_id) from attempts where origin = 'hedge'") \
$(sql "select count(*) from attempts where origin = 'hedge' and state = 'succeeded'")" > "$WORK/$name.facts"
    printf '%s' "$usage" > "$WORK/$name.usage"
    stop_server
}

run unhedged
run hedged
run plain "$COST_S"
run always "$COST_S"
run unbroken "$OUTAGE_S"
run breaker "$OUTAGE_S"

python3 - "$WORK" "$BACKEND" "$TAIL_RATE" "$TAIL_MS" "$AFTER_MS" "$TICKS" <<'PY'
import json, sys
from decimal import Decimal
work, backend, rate, tail, after, ticks = sys.argv[1:]
rows = {}
for name in ("unhedged", "hedged"):
    report = json.load(open(f"{work}/{name}.json"))
    jobs, hedged, won = (int(x) for x in open(f"{work}/{name}.facts").read().split())
    usage = json.loads(open(f"{work}/{name}.usage").read() or "{}")
    cost = Decimal(usage.get("total", {}).get("cost", {}).get("USD", "0"))
    rows[name] = (report, jobs, hedged, won, cost / max(jobs, 1))
print(f"{backend}: sim-fast 20-40 ms, {float(rate):.0%} of calls {tail} ms; hedged after {after} ms to sim-second")
print(f"{'run':>9} {'jobs':>7} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'hedged':>7} {'won':>5} {'cost/job USD':>14}")
for name, (r, jobs, hedged, won, per_job) in rows.items():
    print(f"{name:>9} {jobs:>7} {r['errors']:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['p999_ms']:>9.1f} "
          f"{hedged / max(jobs, 1):>7.2%} {won:>5} {per_job:>14.9f}")
(u, _, _, _, u_cost), (h, _, _, _, h_cost) = rows["unhedged"], rows["hedged"]
ratio = h["p99_ms"] / u["p99_ms"] if u["p99_ms"] else float("nan")
extra = (h_cost / u_cost - 1) if u_cost else Decimal("NaN")
print(f"p99 hedged / unhedged: {ratio:.3f} (target <= 0.1); extra cost a job: {float(extra):+.2%} (target <= 10 %)")
failures = []
if not ratio <= 0.1:
    failures.append(f"the hedged p99 is {ratio:.3f} of the unhedged one (target <= 0.1)")
if not extra <= Decimal("0.10"):
    failures.append(f"a hedged job costs {float(extra):+.2%} more (target <= 10 %)")
_, _, hedged_jobs, hedges_won, _ = rows["hedged"]
if hedged_jobs == 0 or hedges_won == 0:
    failures.append(f"the hedged run hedged {hedged_jobs} jobs, {hedges_won} hedges won")
for name in ("unhedged", "hedged", "plain", "always", "unbroken", "breaker"):
    report = json.load(open(f"{work}/{name}.json"))
    if report["errors"] or not report["ok"]:
        failures.append(f"{name}: {report['ok']} jobs, {report['errors']} errors")
# What a lost hedge costs: CPU (Postgres + server, the simulator in the
# server) and WAL a job, every job hedged against none, over the share of
# jobs hedged.
cost = {}
for name in ("plain", "always"):
    pg, server, wal = (int(x) for x in open(f"{work}/{name}.cpu").read().split())
    jobs, hedged, _ = (int(x) for x in open(f"{work}/{name}.facts").read().split())
    jobs = max(jobs, 1)
    cost[name] = (pg / int(ticks) * 1e6 / jobs, server / int(ticks) * 1e6 / jobs, wal / jobs, hedged / jobs)
    print(f"{name:>9}: {jobs} jobs, {hedged / jobs:.0%} hedged; a job: Postgres {cost[name][0]:,.0f} us, "
          f"server {cost[name][1]:,.0f} us, WAL {cost[name][2]:,.0f} B")
share = cost["always"][3]
if share > 0:
    extra = [(cost["always"][k] - cost["plain"][k]) / share for k in range(3)]
    print(f"a lost hedge: Postgres {extra[0]:,.0f} us + server {extra[1]:,.0f} us of CPU, {extra[2]:,.0f} B of WAL")
print()
print(f"sim-fast failing every call for the run, the jobs failing over to sim-second:")
print(f"{'run':>9} {'jobs':>7} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9}")
for name in ("unbroken", "breaker"):
    r = json.load(open(f"{work}/{name}.json"))
    label = "no breaker" if name == "unbroken" else "breaker"
    print(f"{label:>10} {r['ok']:>6} {r['errors']:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['p999_ms']:>9.1f}")
if failures:
    print("\nFAILED: " + "; ".join(failures))
    sys.exit(1)
PY
