#!/usr/bin/env bash
# The deadline plan's floor for TTFT deadlines paced beyond min_cap_tokens (where no static
# cap keeps the streams' objective or it is broken), on an Intel Xeon (family 6, model 167;
# AVX-512 and AMX, bf16): every condition, sized at the run's start (this machine's decode
# ran faster than when episodes-aged-xeon-amx was sized: a lone decode of 37 to 39 ms
# against 50.8 ms), with the arms of episodes-tight-xeon-amx and episodes-aged-500-xeon-amx,
# thin slack first, 8 episodes each, rotated per episode on one gateway. Admission's TTFT
# check is off for the whole run (PATCH /admin/admission slo_check false), so that every
# arm serves the same arrivals. Run from the repository root, with nothing else running:
# bench/results/episodes-ttft-pace-xeon-amx/run.sh. Resumes where it stopped.
# The step logs, gateway log and progress log were dropped after paced.md, late.md and
# served.md were made (git checkout 0b3d8aa6 -- bench/results/episodes-ttft-pace-xeon-amx
# restores them); later its episode records (DROPPED.md).
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-ttft-pace-xeon-amx
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-ttft-pace-xeon-amx
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-ttft-pace-xeon-amx
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-ttft-pace-xeon-amx
set -euo pipefail
OUT=bench/results/episodes-ttft-pace-xeon-amx
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
run_episodes "${CONDITIONS[0]}" fixed-128,fixed-256,fixed-512,dlfp-ct 8
run_episodes "${CONDITIONS[1]}" fixed-128,fixed-256,fixed-512,dlfp-ct 8
end_gateway_run
