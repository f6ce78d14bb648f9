#!/usr/bin/env bash
# The step-length frontier at 500 ms: how the static caps 64, 128, 192 and 256 and dlfp-ct
# trade the short prompts' TTFT against the long prompts', with 2 and 8 decoding streams,
# 20 episodes each (two Williams cycles of the five arms), the arrivals' offsets drawn by
# episode (--offset-jitter-s 0.5, the default). A short prompt waits for the step in flight
# when it arrives, so longer steps cost short prompts what they save long ones; the run asks
# whether any arm is better on both, and whether dlfp-ct's short prompts are slower than
# under the best feasible static cap with an interval narrow enough to say so. Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-frontier-zen4/run.sh. Resumes where it
# stopped. The short arrivals against the step in flight:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-frontier-zen4
# (analysis.md, made before the step logs and the gateway log were dropped to keep
# bench/results under 25 MB: recover them all with
# git checkout 0a088e86 -- bench/results/episodes-frontier-zen4).
set -euo pipefail
OUT=bench/results/episodes-frontier-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
ARMS=fixed-64,fixed-128,fixed-192,fixed-256,dlfp-ct
run_episodes slo500-d2 "$ARMS" 20
run_episodes slo500-d8 "$ARMS" 20
end_gateway_run
