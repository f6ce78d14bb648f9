#!/usr/bin/env bash
# Interference episodes on the current scheduler: the delivery share (0.05, the default) of
# each step's slack left unplanned, the fits' slopes held non-negative and their covariance
# symmetric. 500 ms with 2 streams (10 episodes) and 8 streams against fixed-128 (the
# reference there in episodes-delivery-zen4 and the runs before it), then 90 ms with 2 and
# 8 streams against fixed-8 and fixed-16; dlfp-ct in every condition; 8 episodes where not
# said; the arms in a balanced (Williams) order, each run's scheduler steps kept (steps/).
# Sizing and conditions are episodes-slack-zen4's (same machine). Run from the repository
# root, with nothing else running: bench/results/episodes-slackshare-zen4/run.sh. Resumes
# where it stopped. The static arms' step logs (steps/episode-<e>/fixed-<n>.json.gz) were
# dropped to keep bench/results under 25 MB: recover them with
# git checkout 0199348 -- bench/results/episodes-slackshare-zen4
set -euo pipefail
OUT=bench/results/episodes-slackshare-zen4
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
run_episodes slo90-d2,slo90-d8 fixed-8,fixed-16,dlfp-ct 8
end_gateway_run
