#!/usr/bin/env bash
# Interference episodes on the current scheduler: the floor's room taken less the delivery
# share, as the budget is, and each floor step's rule in its step log (floor_reason). Every
# condition of the design's aims: 500 ms with 2 streams (10 episodes) and 8 streams against
# fixed-128; 90 ms with 2 and 8 streams, and 60 ms with 8 (thin: 1.7 times the decode-only
# gap when the conditions were sized), against fixed-8 and fixed-16; 8 episodes where not said; the arms in a balanced
# (Williams) order, each run's scheduler steps kept (steps/). Sizing and conditions are
# episodes-slack-zen4's (same machine). Run from the repository root, with nothing else
# running: bench/results/episodes-room-zen4/run.sh. Resumes where it stopped. Per-episode
# floor rules, late steps and the longest TTFTs: analyse.py beside this file (analysis.md).
# The static arms' step logs (steps/episode-<e>/fixed-<n>.json.gz) were dropped to keep
# bench/results under 25 MB: recover them with
# git checkout 096b20f -- bench/results/episodes-room-zen4
set -euo pipefail
OUT=bench/results/episodes-room-zen4
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
THIN=fixed-8,fixed-16,dlfp-ct
run_episodes slo500-d2 fixed-128,dlfp-ct 10
run_episodes slo500-d8 fixed-128,dlfp-ct 8
run_episodes slo90-d2,slo90-d8 "$THIN" 8
run_episodes slo60-d8-thin "$THIN" 8
end_gateway_run
