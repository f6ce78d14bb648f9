#!/usr/bin/env bash
# Interference episodes on the scheduler of commit 1ab1ed1: each gap planned to the
# objective less its delivery share (delivery_share 0.05), a form since withdrawn for the
# share of each step's slack; the fits' slopes held non-negative and their covariance
# symmetric. Every condition of `bench episodes --conditions` and the
# thin-slack one, each run's scheduler steps kept (steps/): 500 ms with 2 streams (10
# episodes) and 8 streams, against off, fixed-64, fixed-128 and fixed-256; 90 ms with 2 and
# 8 streams and 60 ms with 8 streams (6 episodes), against fixed-8 and fixed-16; dlfp-ct and
# the paper's dlfp in every condition; 8 episodes where not said; the arms in a balanced
# (Williams) order. Sizing and conditions are episodes-slack-zen4's (same machine), as in
# episodes-nonneg-zen4. Run from the repository root, with nothing else running:
# bench/results/episodes-delivery-zen4/run.sh. Resumes where it stopped. The step logs of
# every arm but dlfp-ct (steps/episode-<e>/<arm>.json.gz) and the gateway log were dropped
# to keep bench/results under 25 MB: recover them with
# git checkout d998221 -- bench/results/episodes-delivery-zen4
set -euo pipefail
OUT=bench/results/episodes-delivery-zen4
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
WIDE=off,fixed-64,fixed-128,fixed-256,dlfp-ct,dlfp
THIN=fixed-8,fixed-16,dlfp-ct,dlfp
run_episodes slo500-d2 "$WIDE" 10
run_episodes slo500-d8 "$WIDE" 8
run_episodes slo90-d2,slo90-d8 "$THIN" 8
run_episodes slo60-d8-thin "$THIN" 6
end_gateway_run
