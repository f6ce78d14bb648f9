#!/usr/bin/env bash
# The 500 ms conditions of episodes-aged-xeon-amx (2 and 8 decoding streams) with the
# larger static caps beside fixed-128, on an Intel Xeon (family 6, model 167; AVX-512 and
# AMX, bf16): there the best feasible static cap was taken from the AVX-512 Zen 4's
# runs, and on this machine's faster prefill a 128-token step is short of the objective.
# The conditions and long prompts of episodes-aged-xeon-amx (its sizing.json and
# conditions.json copied); fixed-128, fixed-256, fixed-512 and dlfp-ct, 12 episodes each,
# rotated per episode on one gateway. Run from the repository root, with nothing else
# running: bench/results/episodes-aged-500-xeon-amx/run.sh. Resumes where it stopped.
# The step logs, gateway log and progress log were dropped after late.md and
# served.md were made (git checkout a75fb0b1 -- bench/results/episodes-aged-500-xeon-amx
# restores them); the episode records stay.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-aged-500-xeon-amx
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-aged-500-xeon-amx
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-aged-500-xeon-amx
set -euo pipefail
OUT=bench/results/episodes-aged-500-xeon-amx
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-aged-xeon-amx
run_episodes slo500-d2 fixed-128,fixed-256,fixed-512,dlfp-ct 12
run_episodes slo500-d8 fixed-128,fixed-256,fixed-512,dlfp-ct 12
end_gateway_run
