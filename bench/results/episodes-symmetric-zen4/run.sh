#!/usr/bin/env bash
# Interference episodes at 90 ms with 2 and 8 streams on the current scheduler (the fits'
# slopes held non-negative and their covariance kept symmetric), after a shorter history
# at 500 ms on the same gateway, as in episodes-nonneg-zen4 (where the plan's model went
# wrong at 90 ms with 2 streams after the 500 ms conditions): 500 ms with 2 streams (10
# episodes) and 8 streams (8) against fixed-128 only, then 90 ms with 2 and 8 streams (8
# episodes) against fixed-8 and fixed-16, dlfp-ct and the paper's dlfp, the arms in a
# balanced order, each run's steps kept. Sizing and conditions are episodes-slack-zen4's.
# Run from the repository root, with nothing else running:
# bench/results/episodes-symmetric-zen4/run.sh. Resumes where it stopped. Its records, the
# step logs of every arm but dlfp-ct and the gateway log were dropped to keep bench/results
# under 25 MB (DROPPED.md): recover them with
# git checkout 83131e7 -- bench/results/episodes-symmetric-zen4
set -euo pipefail
OUT=bench/results/episodes-symmetric-zen4
SIBLING=bench/results/episodes-slack-zen4
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v3}
# shellcheck source=bench/lib.sh
source bench/lib.sh
mkdir -p "$OUT"
cp -n "$SIBLING/sizing.json" "$SIBLING/conditions.json" "$OUT/"
begin_gateway_run
run_episodes slo500-d2 fixed-128,dlfp-ct 10
run_episodes slo500-d8 fixed-128,dlfp-ct 8
run_episodes slo90-d2,slo90-d8 fixed-8,fixed-16,dlfp-ct,dlfp 8
end_gateway_run
