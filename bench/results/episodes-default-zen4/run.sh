#!/usr/bin/env bash
# Every condition with the default step_rate_loss of 0.02, which episodes-rate-loss-zen4
# chose on one run of 24 episodes a condition at 500 ms. The same scheduler otherwise as
# episodes-paced-every-zen4 (the knee and the paced floor).
# 1. A fresh run of the two conditions that choice rests on: 500 ms with 2 and with 8
#    decoding streams, default dlfp-ct against fixed-128, 24 episodes each. Read before
#    the run: the choice stands if dlfp-ct meets both TTFT clauses in both conditions
#    (paired ratio at most 1.0, upper bound at most 1.1, all arrivals and short prompts);
#    a miss is reported as a miss.
# 2. The thin conditions at 0.02: 90 ms with 2 streams (fixed-8, fixed-16, dlfp-ct, 12
#    episodes), 90 ms with 8 streams (16 episodes) and 60 ms with 8 streams (12 episodes),
#    each with fixed-8, the cap with the tightest gaps in every earlier run there.
# The arms are rotated per episode on one gateway. Sizing and conditions are
# episodes-slack-zen4's (same machine). Run from the repository root, with nothing else
# running: bench/results/episodes-default-zen4/run.sh. Resumes where it stopped.
# Tables: dlfp-gateway bench episodes --results bench/results/episodes-default-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-default-zen4
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-default-zen4
set -euo pipefail
OUT=bench/results/episodes-default-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo500-d2 fixed-128,dlfp-ct 24
run_episodes slo500-d8 fixed-128,dlfp-ct 24
run_episodes slo90-d2 fixed-8,fixed-16,dlfp-ct 12
run_episodes slo90-d8 fixed-8,dlfp-ct 16
run_episodes slo60-d8-thin fixed-8,dlfp-ct 12
end_gateway_run
