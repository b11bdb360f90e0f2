#!/usr/bin/env bash
# The mutation score of the rules: cargo-mutants over the domain crate
# (`crates/onejob-domain`: states, admission, budgets, money, the retry
# policy, idempotency), killed by that crate's own unit tests. A mutant
# rebuilds only that crate, so a run takes minutes, not hours; it is not part
# of CI (see docs/testing.md for the figures and what became of each missed
# mutant).
#
#   scripts/mutants.sh                 # every mutant; results in mutants.out/
#   scripts/mutants.sh --file crates/onejob-domain/src/policy.rs
#   OUT=/tmp/m scripts/mutants.sh      # results elsewhere
#
# Exit status (cargo-mutants' own): 0 when every viable mutant was caught,
# 2 when some were missed, 3 when some made the tests hang (whether or not
# some were missed), 4 for a failed baseline. Today: 3 (the one equivalent
# mutant and the one that hangs are in docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
exec cargo mutants --package onejob-domain --test-package onejob-domain \
    --output "${OUT:-.}" --no-shuffle "$@"
