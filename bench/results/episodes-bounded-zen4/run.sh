#!/usr/bin/env bash
# dlfp-ct with every step's prefill bounded by 128 tokens (dlfp-ct-max-128: max_cap_tokens
# 128) beside default dlfp-ct and fixed-128 at 500 ms, with 2 and 8 decoding streams, 24
# episodes each (four Williams cycles of the three arms), the arrivals' offsets drawn by
# episode. episodes-frontier-zen4 found default dlfp-ct's short prompts waiting for its
# longer step in flight, and the step after it shorter than fixed-128's; the bound asks
# whether steps of fixed-128's size, ended with a short prompt as the plan ends them, make
# short prompts faster without making all arrivals slower than under fixed-128. Sizing
# and conditions are episodes-slack-zen4's (same machine). Run from the repository root,
# with nothing else running: bench/results/episodes-bounded-zen4/run.sh. Resumes where it
# stopped. The short arrivals against the step in flight:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-bounded-zen4
# (analysis.md, made before the step logs and the gateway log were dropped to keep
# bench/results under 25 MB: recover them with
# git checkout fc73a930 -- bench/results/episodes-bounded-zen4).
set -euo pipefail
OUT=bench/results/episodes-bounded-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
ARMS=fixed-128,dlfp-ct,dlfp-ct-max-128
run_episodes slo500-d2 "$ARMS" 24
run_episodes slo500-d8 "$ARMS" 24
end_gateway_run
