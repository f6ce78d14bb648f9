#!/usr/bin/env bash
# Every condition on an Intel Xeon (family 6, model 167; AVX-512 and AMX, bf16), on the
# scheduler whose margin ratios leave its window 256 steps with prefill after them, floor
# steps counted (slack_model.MARGIN_MAX_AGE), with the arms, episode counts and protocol of
# episodes-aged-zen4, the conditions sized afresh at the run's start on this machine (its
# own sizing.json and conditions.json):
# 1. The default objective with 2 and 8 decoding streams: fixed-128 and dlfp-ct, 24
#    episodes each.
# 2. The tight objective with 2 streams: fixed-8, fixed-16 and dlfp-ct, 12 episodes; with
#    8 streams and the thin condition: fixed-8 and dlfp-ct, 12 episodes each.
# The arms are rotated per episode on one gateway. Run from the repository root, with
# nothing else running: bench/results/episodes-aged-xeon-amx/run.sh. Resumes where it
# stopped. It was stopped after the third condition (150 ms with 2 streams): admission
# refused the second long prompt of most of its episodes, every one of dlfp-ct's, and
# the static caps named here, the AVX-512 Zen 4's, are not this machine's best. The
# tight conditions ran in episodes-tight-xeon-amx instead, the 500 ms ones again with
# larger caps in episodes-aged-500-xeon-amx.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-aged-xeon-amx
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-aged-xeon-amx
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-aged-xeon-amx
set -euo pipefail
OUT=bench/results/episodes-aged-xeon-amx
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_defaults
mkdir -p "$OUT"
begin_gateway_run
size_conditions
run_episodes "${CONDITIONS[0]}" fixed-128,dlfp-ct 24
run_episodes "${CONDITIONS[1]}" fixed-128,dlfp-ct 24
run_episodes "${CONDITIONS[2]}" fixed-8,fixed-16,dlfp-ct 12
run_episodes "${CONDITIONS[3]}" fixed-8,dlfp-ct 12
run_episodes "${CONDITIONS[4]}" fixed-8,dlfp-ct 12
end_gateway_run
