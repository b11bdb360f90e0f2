#!/usr/bin/env bash
# The hedging load tests at full size, on both backends (the suite runs
# them with 100 jobs): 500 jobs on a provider whose every call takes the
# tail, hedges within max_share; 1,000 hedged jobs, one winner each, every
# loser canceled at its provider.
#
#   scripts/hedging-full.sh
set -euo pipefail
cd "$(dirname "$0")/.."
HEDGED_JOBS=500 cargo nextest run --features failpoints --test it --no-fail-fast \
    -E 'test(/^hedging::(postgres|sqlite)::hedges_stay_within_max_share_under_a_load_all_in_the_tail$/)'
HEDGED_JOBS=1000 cargo nextest run --features failpoints --test it --no-fail-fast \
    -E 'test(/^hedging::(postgres|sqlite)::every_hedged_job_has_exactly_one_winner_and_every_loser_is_canceled$/)'
