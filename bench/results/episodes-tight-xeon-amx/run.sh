#!/usr/bin/env bash
# The tight conditions of episodes-aged-xeon-amx (150 ms with 2 and 8 decoding streams,
# 90 ms with 8), on an Intel Xeon (family 6, model 167; AVX-512 and AMX, bf16), with
# admission's TTFT check off (PATCH /admin/admission slo_check false, for the whole run)
# so that every arm serves the same arrivals: there, with that check on, admission
# refused the second long prompt of most episodes (predicted past its 30 s TTFT
# objective), every one of dlfp-ct's at 150 ms with 2 streams. The static caps are this
# machine's: at 150 ms fixed-16, fixed-32 and fixed-64 (its prefill is fast enough that
# fixed-16 kept its P99 gap under 100 ms there); at 90 ms fixed-8 and fixed-16. The
# conditions and long prompts of episodes-aged-xeon-amx (its sizing.json and
# conditions.json copied); 8 episodes each, rotated per episode on one gateway. Run from
# the repository root, with nothing else running, after episodes-aged-500-xeon-amx:
# bench/results/episodes-tight-xeon-amx/run.sh. Resumes where it stopped.
# The step logs, gateway log and progress log were dropped after paced.md, late.md and
# served.md were made (git checkout a75fb0b1 -- bench/results/episodes-tight-xeon-amx
# restores them); the episode records stay.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-tight-xeon-amx
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-tight-xeon-amx
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-tight-xeon-amx
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-tight-xeon-amx
set -euo pipefail
OUT=bench/results/episodes-tight-xeon-amx
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-aged-xeon-amx
slo_check_off
run_episodes slo150-d2 fixed-16,fixed-32,fixed-64,dlfp-ct 8
run_episodes slo150-d8 fixed-16,fixed-32,fixed-64,dlfp-ct 8
run_episodes slo90-d8-thin fixed-8,fixed-16,dlfp-ct 8
end_gateway_run
