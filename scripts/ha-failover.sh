#!/usr/bin/env bash
# Runs the failover tests of tests/faults/failover.rs (a real Patroni cluster
# started by scripts/ha-cluster.sh, two onejob servers, keyed load) RUNS
# times and prints each run's figures and verdict; docs/guarantees.md has
# what they gave.
#
#   scripts/ha-failover.sh                  # every failover test, once
#   RUNS=2 scripts/ha-failover.sh           # twice each
#   ASYNC=1 RUNS=10 scripts/ha-failover.sh  # the leader's death, replication asynchronous, ten times
#   TERMINATE_S=30 scripts/ha-failover.sh   # the backend terminations' length (seconds)
#
# Each test checks, and fails if not: every key acknowledged 2xx names its
# job on the new primary, no attempt reached the provider twice, no job has
# two winners, no client saw a 500, every server serves again. With ASYNC=1
# a lost acknowledgement or a second provider call shows as a failed run;
# the summary counts them. Needs Debian's patroni, etcd-server and haproxy,
# and the test Postgres's binaries (see docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-1}"
filter="failover::postgres_"
env=(ONEJOB_TERMINATE_S="${TERMINATE_S:-30}")
if [ -n "${ASYNC:-}" ]; then
    filter="failover::postgres_cluster::when_the_leader_dies"
    env+=(ONEJOB_HA_ASYNC=1)
fi

cargo test -q --test faults --no-run
passed=0
failed=0
for run in $(seq "$RUNS"); do
    echo "== run $run of $RUNS"
    log="$(mktemp)"
    if env "${env[@]}" cargo test -q --test faults "$filter" -- --include-ignored --nocapture --test-threads=1 >"$log" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        grep -E "panicked|assertion|failed|acknowledged keys name no stored job|sent to the provider twice" "$log" \
            | cut -c1-600 | head -20 || true
    fi
    grep -oE "(figures|checked): .*|the HA cluster started in .*" "$log" || true
    rm -f "$log"
done
echo "== $passed runs passed, $failed failed"
[ "$failed" -eq 0 ]
