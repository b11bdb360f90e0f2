#!/usr/bin/env bash
# Chaos: three `onejob serve` nodes on one Postgres and
# one provider simulator of their own (`onejob sim`, so that a killed node
# never takes the provider with it), under client load, while the faults go
# round for DURATION seconds (at least one full round of each):
#
#   kill      a node is killed with SIGKILL while its attempts are in flight,
#             then started again; clients move to another node on errors
#   postgres  Postgres is stopped (`pg_ctl stop -m fast`) for PG_DOWN seconds,
#             then started; onejob is not restarted
#   provider  jobs on providers that reset the connection before or after the
#             request, never send headers, stall the body, or answer 503
#
# Clients create jobs with new keys and retry each key (same key, any node)
# on 503, 429 and transport errors until it is acknowledged. After each
# round, once every attempt has settled: one job per key, every acknowledged
# key holds the job it was told, no job with two winners, no attempt id sent
# to the provider twice (the simulator counts a repeat of any id of the run,
# up to 3,500,000 distinct ids, and a round past that fails); and a kill must have caught attempts in flight
# (reaped: leases of the dead node turned unknown by a survivor). A table at
# the end; exit status 1 when a check failed.
#
#   scripts/chaos.sh                          # 10 minutes on a throwaway Postgres
#   DURATION=60 PG_DOWN=10 scripts/chaos.sh
#   DURATION=1 PG_DOWN=5 ...                  # one round of each fault (what CI runs)
#   ONEJOB_BIN=target/debug/onejob ...        # use that binary instead of building a release one
#
# How long a round may take to settle (SETTLE, seconds) is computed from the
# configuration the script writes: every attempt the task allows reaching
# its provider's deadline, then the lease margin, the reaper, the
# reconciler's longest backoff and the provider's absence grace. The graces
# are set to 2 s here (the default, 60 s, would make a reset-before-request
# attempt and its retry take two minutes to settle).
#
# The postgres round needs the throwaway cluster (no DATABASE_URL): it is
# skipped, and says so, on a server the script did not start.
source "$(dirname "$0")/../bench/lib.sh"
DURATION=${DURATION:-600}
PG_DOWN=${PG_DOWN:-10}
BASE_PORT=${BASE_PORT:-18280}
SIM_PORT=$((BASE_PORT + 9))
NODE_PIDS=()

build
start_postgres
write_config '
[providers.chaos-slow]
kind = "sim"
absence_grace_ms = 2000
timeout_ms = 4000
latency_ms = 1500
jitter_ms = 500

[providers.chaos-reset-before]
kind = "sim"
absence_grace_ms = 2000
timeout_ms = 2000
latency_ms = 50
fault = "reset_before_request"

[providers.chaos-reset-after]
kind = "sim"
absence_grace_ms = 2000
timeout_ms = 2000
latency_ms = 50
fault = "reset_after_request"

[providers.chaos-no-headers]
kind = "sim"
absence_grace_ms = 2000
timeout_ms = 1000
latency_ms = 50
fault = "no_headers"

[providers.chaos-stalled]
kind = "sim"
absence_grace_ms = 2000
timeout_ms = 1000
latency_ms = 50
fault = "stalled_body"

[providers.chaos-flaky]
kind = "sim"
absence_grace_ms = 2000
timeout_ms = 2000
latency_ms = 20
error_rate = 0.5
error_status = 503
'
# Short leases and a reaper and reconciler that look often, so that a round
# settles in seconds; a simulator of its own for every node.
sed -i -e 's/^lease_margin_ms = .*/lease_margin_ms = 1000/' -e 's/^reaper_interval_ms = .*/reaper_interval_ms = 200/' \
    -e 's/^reconcile_interval_ms = .*/reconcile_interval_ms = 200/' -e 's/^reconcile_backoff_ms = .*/reconcile_backoff_ms = 200/' \
    -e 's/^reconcile_backoff_max_ms = .*/reconcile_backoff_max_ms = 2000/' -e 's/^poll_interval_ms = .*/poll_interval_ms = 100/' \
    -e 's/^\(\[providers\.sim-[a-z0-9-]*\]\)$/\1\nabsence_grace_ms = 2000/' \
    -e "s|^\[simulator\]\$|[simulator]\nurl = \"http://127.0.0.1:$SIM_PORT\"|" "$WORK/bench.toml"
SETTLE=${SETTLE:-$(python3 - "$WORK/bench.toml" <<'PY'
import sys, tomllib
config = tomllib.load(open(sys.argv[1], "rb"))
worker, task = config["worker"], config["tasks"]["summarize"]
used = [p for name, p in config["providers"].items() if name.startswith("chaos-") or name in ("sim-fast", "sim-slow")]
attempt_ms = max(p["timeout_ms"] + p["absence_grace_ms"] for p in used) + worker["lease_margin_ms"] \
    + worker["reaper_interval_ms"] + worker["reconcile_backoff_max_ms"] + task["retry_backoff_ms"]
print(task["max_attempts"] * attempt_ms // 1000 + 10)
PY
)}
new_database onejob_chaos

RUST_LOG=warn "$BIN" sim --listen "127.0.0.1:$SIM_PORT" --config "$WORK/bench.toml" > "$WORK/sim.log" 2>&1 &
SIM_PID=$!
trap 'kill "${NODE_PIDS[@]}" "$SIM_PID" 2>/dev/null; wait 2>/dev/null; cleanup' EXIT

# start_node N: `onejob serve` on BASE_PORT + N, waits for /readyz.
start_node() {
    local port=$((BASE_PORT + $1))
    RUST_LOG=warn "$BIN" serve --config "$WORK/bench.toml" --no-migrate --listen "127.0.0.1:$port" \
        >> "$WORK/node-$1.log" 2>&1 &
    NODE_PIDS[$1]=$!
    wait_ready "$port" "$WORK/node-$1.log"
}

for n in 0 1 2; do start_node "$n"; done
PORTS="$BASE_PORT,$((BASE_PORT + 1)),$((BASE_PORT + 2))"
log "three nodes on ports $PORTS, the simulator on $SIM_PORT; a round settles within $SETTLE s"

# client ROUND SECONDS THREADS PROVIDERS: creates jobs with keys ROUND-…
# for SECONDS, each key retried until acknowledged; writes ROUND.acks (key
# and job id a line) and ROUND.client (counts as JSON).
client() {
    python3 - "$WORK" "$1" "$2" "$3" "$4" "$PORTS" "$TOKEN" <<'PY'
import json, sys, threading, time, urllib.error, urllib.request
work, round_name, seconds, threads, providers, ports, token = sys.argv[1:8]
providers, ports = providers.split(","), ports.split(",")
stop_at = time.time() + float(seconds)
lock = threading.Lock()
counts = {"acknowledged": 0, "unavailable": 0, "rate_limited": 0, "transport": 0, "server_errors": 0, "other": 0}
acks = []

def post(port, key, provider):
    body = json.dumps({"task": "summarize", "input": {"text": f"chaos {key}"}, "provider": provider}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/jobs", data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Idempotency-Key": key})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, None
    except Exception:
        return None, None

def run(thread):
    n, node = 0, thread
    while time.time() < stop_at:
        key, provider = f"{round_name}-{thread}-{n}", providers[n % len(providers)]
        n += 1
        give_up = time.time() + 120
        while True:
            status, job = post(ports[node % len(ports)], key, provider)
            with lock:
                if status in (200, 201):
                    counts["acknowledged"] += 1
                    acks.append((key, job["id"]))
                    break
                kind = {503: "unavailable", 429: "rate_limited", None: "transport"}.get(status)
                kind = kind or ("server_errors" if status >= 500 else "other")
                counts[kind] += 1
            if kind == "other" or time.time() > give_up:
                break
            node += 1  # as a load balancer would: the next try may reach another node
            time.sleep(0.1)
        time.sleep(0.05)

workers = [threading.Thread(target=run, args=(t,)) for t in range(int(threads))]
for w in workers: w.start()
for w in workers: w.join()
with open(f"{work}/{round_name}.acks", "w") as out:
    for key, job_id in acks: out.write(f"{key} {job_id}\n")
json.dump(counts, open(f"{work}/{round_name}.client", "w"))
PY
}

psql_value() { psql -Atq "$DATABASE_URL" -c "$1"; }

# check ROUND FAULT STARTED: waits until every attempt settled, then checks
# the invariants and appends a row to rows.jsonl.
check() {
    local round=$1 fault=$2 settled=-1 waited=0
    while [ "$waited" -lt "$SETTLE" ]; do
        if [ "$(psql_value "select count(*) from attempts where state in ('pending', 'running', 'unknown')")" = 0 ]; then
            settled=$waited
            break
        fi
        sleep 1
        waited=$((waited + 1))
    done
    psql_value "select idempotency_key || ' ' || id::text from jobs where idempotency_key like '$round-%'" > "$WORK/$round.stored"
    curl -s "http://127.0.0.1:$SIM_PORT/v1/requests" > "$WORK/$round.sim"
    python3 - "$WORK" "$round" "$fault" "$settled" \
        "$(psql_value "select count(*) from (select 1 from jobs group by owner_id, idempotency_key having count(*) > 1) d")" \
        "$(psql_value "select count(*) from (select 1 from attempts where state = 'succeeded' group by owner_id, job_id having count(*) > 1) d")" \
        "$(psql_value "select count(*) from jobs j where j.state = 'succeeded' and not exists (select 1 from attempts a where a.owner_id = j.owner_id and a.job_id = j.id and a.number = j.winning_attempt and a.state = 'succeeded')")" \
        "$(psql_value "select count(*) from jobs where idempotency_key like '$round-%' and state = 'succeeded'")" \
        "$(psql_value "select count(*) from job_events e join jobs j on j.owner_id = e.owner_id and j.id = e.job_id
                       where j.idempotency_key like '$round-%' and e.kind = 'attempt-unknown'
                       and e.detail -> 'error' ->> 'type' = 'lease-expired'")" <<'PY' >> "$WORK/rows.jsonl"
import json, sys
work, round_name, fault, settled, duplicate_keys, two_winners, bad_winner, succeeded, reaped = sys.argv[1:10]
counts = json.load(open(f"{work}/{round_name}.client"))
acks = dict(line.split() for line in open(f"{work}/{round_name}.acks") if line.strip())
stored = dict(line.split() for line in open(f"{work}/{round_name}.stored") if line.strip())
lost = sum(1 for key, job_id in acks.items() if stored.get(key) != job_id)
# Sent twice: the simulator's `repeats` counts every arrival of an id it
# saw before, also one its log (the latest 20,000 requests) forgot; it is the
# run's, so this round's are those since the last round's check. Past
# `most_ids_seen` distinct ids it cannot see repeats: the round fails.
sim = json.load(open(f"{work}/{round_name}.sim"))
try:
    before = int(open(f"{work}/repeats").read())
except FileNotFoundError:
    before = 0
open(f"{work}/repeats", "w").write(str(sim["repeats"]))
sent_twice = sim["repeats"] - before
unremembered = sim["ids_unremembered"]
if sent_twice:
    print(f"{round_name}: ids sent twice (the latest): {sim['repeated_ids'][-sent_twice:]}", file=sys.stderr)
if unremembered:
    print(f"{round_name}: {unremembered} ids past the simulator's {sim['most_ids_seen']}: repeats unseen", file=sys.stderr)
counts.pop("acknowledged")
row = dict(round=round_name, fault=fault, acknowledged=len(acks), succeeded=int(succeeded), **counts,
           settled_s=int(settled), duplicate_keys=int(duplicate_keys), two_winners=int(two_winners) + int(bad_winner),
           lost=lost, sent_twice=sent_twice, ids_unremembered=unremembered, reaped=int(reaped))
row["ok"] = (row["settled_s"] >= 0 and row["duplicate_keys"] == 0 and row["two_winners"] == 0 and lost == 0
             and sent_twice == 0 and unremembered == 0 and counts["server_errors"] == 0 and counts["other"] == 0
             # a kill that caught no attempt in flight proved nothing
             and (fault != "kill" or row["reaped"] > 0))
print(json.dumps(row))
PY
    tail -n 1 "$WORK/rows.jsonl" >&2
}

round_kill() {
    client "$1" 4 6 chaos-slow &
    local client_pid=$!
    sleep 2
    local victim=$((RANDOM % 3))
    log "$1: SIGKILL node $victim (pid ${NODE_PIDS[$victim]})"
    kill -KILL "${NODE_PIDS[$victim]}"
    wait "${NODE_PIDS[$victim]}" 2>/dev/null || true
    wait "$client_pid"
    start_node "$victim"
}

round_postgres() {
    client "$1" $((PG_DOWN + 4)) 4 sim-fast &
    local client_pid=$!
    sleep 2
    log "$1: Postgres stopped for $PG_DOWN s"
    as_postgres "$PGBIN/pg_ctl" -D "$CLUSTER" -m fast -w stop > /dev/null
    sleep "$PG_DOWN"
    as_postgres "$PGBIN/pg_ctl" -D "$CLUSTER" -l "$WORK/postgres.log" -w \
        -o "-k $WORK -c listen_addresses='' -p 5432 -c max_connections=1200 -c shared_buffers=512MB" start > /dev/null
    log "$1: Postgres started again"
    wait "$client_pid"
}

round_provider() {
    client "$1" 3 4 chaos-reset-before,chaos-reset-after,chaos-no-headers,chaos-stalled,chaos-flaky
}

START=$(date +%s)
ROUND=0
while :; do
    for fault in kill postgres provider; do
        ROUND=$((ROUND + 1))
        name="r$ROUND"
        if [ "$fault" = postgres ] && [ -z "$CLUSTER" ]; then
            log "$name: postgres skipped (DATABASE_URL names a server this script did not start)"
            continue
        fi
        log "$name: $fault"
        "round_$fault" "$name"
        check "$name" "$fault"
    done
    [ $(($(date +%s) - START)) -lt "$DURATION" ] || break
done

python3 - "$WORK" "$(($(date +%s) - START))" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(f"{sys.argv[1]}/rows.jsonl")]
print(f"\nchaos: {len(rows)} rounds in {sys.argv[2]} s, three nodes on one Postgres\n")
columns = ["round", "fault", "acknowledged", "succeeded", "unavailable", "transport", "server_errors", "reaped", "settled_s",
           "duplicate_keys", "two_winners", "lost", "sent_twice", "ok"]
heads = ["round", "fault", "acked", "succeeded", "503s", "transport", "5xx other", "reaped", "settled s", "dup keys",
         "2 winners", "lost", "sent twice", "verdict"]
widths = [max(len(h), 8) for h in heads]
print("  ".join(h.rjust(w) for h, w in zip(heads, widths)))
for row in rows:
    cells = [str(row[c]) if c != "ok" else ("ok" if row[c] else "FAILED") for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
failed = [r["round"] for r in rows if not r["ok"]]
print("\n" + (f"failed rounds: {', '.join(failed)}" if failed else "every round: one job per key, no acknowledged job lost, "
      "one winner per job, no attempt sent twice"))
sys.exit(1 if failed else 0)
PY
