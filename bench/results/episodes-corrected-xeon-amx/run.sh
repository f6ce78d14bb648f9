#!/usr/bin/env bash
# Every condition with the margin's correction moving both ways (down to 0.5, the steps
# the knee cut by little counted as deadline-bound for it) and floor steps the fits
# predicted growing the trust bound, on an Intel Xeon (family 6, model 167; AVX-512 and
# AMX, bf16), sized at the run's start: thin slack first, then the tight conditions, 8
# episodes each, then the 500 ms conditions with 16, with this machine's static caps,
# rotated per episode on one gateway; the plan as episodes-every-condition-xeon-amx ran
# it otherwise. Admission's TTFT check is off for the whole run (slo_check_off), so that
# every arm serves the same arrivals. Run from the repository root, with nothing else
# running: bench/results/episodes-corrected-xeon-amx/run.sh. Resumes where it stopped.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-corrected-xeon-amx
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-corrected-xeon-amx
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-corrected-xeon-amx
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-corrected-xeon-amx
# The step logs, gateway log and the short/long plots were dropped after the tables were
# made (git checkout 3258798b -- bench/results/episodes-corrected-xeon-amx restores them);
# the episode records stay.
set -euo pipefail
OUT=bench/results/episodes-corrected-xeon-amx
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_defaults
mkdir -p "$OUT"
begin_gateway_run
size_conditions
slo_check_off
run_episodes "${CONDITIONS[4]}" fixed-8,fixed-16,dlfp-ct 8
run_episodes "${CONDITIONS[2]}" fixed-16,fixed-32,fixed-64,dlfp-ct 8
run_episodes "${CONDITIONS[3]}" fixed-16,fixed-32,fixed-64,dlfp-ct 8
run_episodes "${CONDITIONS[1]}" fixed-128,fixed-256,fixed-512,dlfp-ct 16
run_episodes "${CONDITIONS[0]}" fixed-128,fixed-256,fixed-512,dlfp-ct 16
end_gateway_run
