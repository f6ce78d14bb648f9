#!/usr/bin/env bash
# Two questions episodes-paced-every-zen4 left, on the same machine and scheduler:
# 1. 90 ms with 2 decoding streams with fixed-8 beside fixed-16 and dlfp-ct, 12 episodes:
#    there no static cap was within (fixed-16 not feasible), and the aim then names the
#    cap with the tightest gaps, which that run did not have.
# 2. The knee's rate loss at 500 ms: default dlfp-ct (step_rate_loss 0.05) beside
#    dlfp-ct-loss-2 (0.02) and fixed-128, with 8 decoding streams and with 2, 24 episodes
#    each. In episodes-paced-every-zen4 default dlfp-ct met both TTFT clauses with 2
#    streams but not with 8 (all arrivals 1.02 [1.00, 1.04] times fixed-128's, short
#    prompts 0.85): each knee step gives up up to 5% of the slack's rate to end sooner,
#    and where fixed-128 already fills most of the objective that loss is not made up.
#    The decision, set before the run: the default becomes 0.02 only if dlfp-ct-loss-2
#    meets both clauses in both conditions (ratio at most 1.0, upper bound at most 1.1,
#    all arrivals and short prompts) and the default misses one in this run.
# The arms are rotated per episode on one gateway. Sizing and conditions are
# episodes-slack-zen4's (same machine). Run from the repository root, with nothing else
# running: bench/results/episodes-rate-loss-zen4/run.sh. Resumes where it stopped.
# Tables: dlfp-gateway bench episodes --results bench/results/episodes-rate-loss-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-rate-loss-zen4
set -euo pipefail
OUT=bench/results/episodes-rate-loss-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo90-d2 fixed-8,fixed-16,dlfp-ct 12
run_episodes slo500-d8 fixed-128,dlfp-ct,dlfp-ct-loss-2 24
run_episodes slo500-d2 fixed-128,dlfp-ct,dlfp-ct-loss-2 24
end_gateway_run
