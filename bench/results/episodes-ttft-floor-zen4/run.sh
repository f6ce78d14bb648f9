#!/usr/bin/env bash
# Interference episodes where the slack is thin, on the current scheduler: a budget under
# min_cap_tokens whose rate falls short of the rate the waiting prompts' TTFT deadlines
# need (earliest deadline first) goes at the floor (floor_reason ttft_at_risk). 90 ms with
# 2 and 8 streams, and 60 ms with 8, against fixed-8 and fixed-16, as in
# episodes-room-zen4 (the run before the rule, same machine and day); 8 episodes; the arms
# in a balanced (Williams) order, each run's scheduler steps kept (steps/). Sizing and
# conditions are episodes-slack-zen4's. Run from the repository root, with nothing else
# running: bench/results/episodes-ttft-floor-zen4/run.sh. Resumes where it stopped.
# Per-episode floor rules, late steps and the longest TTFTs:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-ttft-floor-zen4
# (analysis.md). The static arms' step logs (steps/episode-<e>/fixed-<n>.json.gz) were
# dropped to keep bench/results under 25 MB (then its records, every step log and its
# gateway log: DROPPED.md): recover them with
# git checkout 742aaa6 -- bench/results/episodes-ttft-floor-zen4
set -euo pipefail
OUT=bench/results/episodes-ttft-floor-zen4
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
run_episodes slo90-d2,slo90-d8 "$THIN" 8
run_episodes slo60-d8-thin "$THIN" 8
end_gateway_run
