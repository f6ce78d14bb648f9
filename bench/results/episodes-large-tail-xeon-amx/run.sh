#!/usr/bin/env bash
# The deadline plan with the large steps' tail (a step whose budget makes its increment at
# least twice the decodes' time is planned at the margin of such steps alone), on an Intel
# Xeon (family 6, model 167; AVX-512 and AMX, bf16): the two 500 ms conditions, sized at
# the run's start, 8 streams first, with the arms of episodes-ttft-pace-xeon-amx, 16
# episodes each, rotated per episode on one gateway. The tighter conditions cannot reach
# a large step (their slack after the decodes' tail is under twice the decodes' time), so
# they are not run. Admission's TTFT check is off for the whole run (PATCH
# /admin/admission slo_check false), so that every arm serves the same arrivals. Run from
# the repository root, with nothing else running:
# bench/results/episodes-large-tail-xeon-amx/run.sh. Resumes where it stopped.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-large-tail-xeon-amx
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-large-tail-xeon-amx
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-large-tail-xeon-amx
# The step logs, gateway log and progress log and its plots were dropped after the tables
# were made (git checkout c3a64576 -- bench/results/episodes-large-tail-xeon-amx restores them); the
# episode records stay.
set -euo pipefail
OUT=bench/results/episodes-large-tail-xeon-amx
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_defaults
mkdir -p "$OUT"
begin_gateway_run
size_conditions
slo_check_off
run_episodes "${CONDITIONS[1]}" fixed-128,fixed-256,fixed-512,dlfp-ct 16
run_episodes "${CONDITIONS[0]}" fixed-128,fixed-256,fixed-512,dlfp-ct 16
end_gateway_run
