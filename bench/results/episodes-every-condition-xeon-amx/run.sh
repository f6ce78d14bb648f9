#!/usr/bin/env bash
# Every condition with the deadline plan as it stands (the floor for TTFT deadlines paced
# beyond min_cap_tokens; the same plan as episodes-ttft-pace-xeon-amx), on an Intel Xeon
# (family 6, model 167; AVX-512 and AMX, bf16), sized at the run's start: thin slack
# first, then the tight conditions, 8 episodes each, then the 500 ms conditions with 16,
# with this machine's static caps, rotated per episode on one gateway. Admission's TTFT
# check is off for the whole run (PATCH /admin/admission slo_check false), so that every
# arm serves the same arrivals. Run from the repository root, with nothing else running:
# bench/results/episodes-every-condition-xeon-amx/run.sh. Resumes where it stopped.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-every-condition-xeon-amx
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-every-condition-xeon-amx
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-every-condition-xeon-amx
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-every-condition-xeon-amx
# The step logs, gateway log and progress log and the plots no document shows were dropped after the tables
# were made (git checkout c3a64576 -- bench/results/episodes-every-condition-xeon-amx restores them); the
# episode records were dropped later (DROPPED.md).
set -euo pipefail
OUT=bench/results/episodes-every-condition-xeon-amx
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
