#!/usr/bin/env bash
# dlfp-ct with each step stopped at the knee of its prefill rate (step_rate_loss 0.05, the
# default) beside dlfp-ct filling every step to its slack (dlfp-ct-full: step_rate_loss 0)
# and the static caps, in every condition of the design's aims: 500 ms with 2 and 8
# decoding streams against fixed-128, 24 episodes each (four Williams cycles of the three
# arms); 90 ms with 2 and 8 streams and 60 ms with 8, against fixed-8 and fixed-16, 8
# episodes each (two cycles of the four arms); the arrivals' offsets drawn by episode.
# episodes-bounded-zen4 found the short prompts faster than under fixed-128 only with
# steps about as short as fixed-128's; the knee asks whether a step that gives up at most
# 5% of the slack's rate ends soon enough for them, wherever the objective is. Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-knee-zen4/run.sh. Resumes where it
# stopped. The short arrivals against the step in flight:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-knee-zen4
# (analysis.md, made before the step logs and the gateway log were dropped to keep
# bench/results under 25 MB: recover them with
# git checkout 25c50840 -- bench/results/episodes-knee-zen4).
set -euo pipefail
OUT=bench/results/episodes-knee-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
ARMS=fixed-128,dlfp-ct,dlfp-ct-full
THIN=fixed-8,fixed-16,dlfp-ct,dlfp-ct-full
run_episodes slo500-d2 "$ARMS" 24
run_episodes slo500-d8 "$ARMS" 24
run_episodes slo90-d2,slo90-d8 "$THIN" 8
run_episodes slo60-d8-thin "$THIN" 8
end_gateway_run
