#!/usr/bin/env bash
# Every condition on the scheduler with the decodes' tail kept clear of the steps learnt as
# the machine's new speed (5ce6611), with the conditions sized afresh at the run's start
# (its own sizing.json and conditions.json): the thin condition is 1.7 times the decode
# gap with 8 streams as measured now, down to a multiple of 10 ms, as the aims define it.
# episodes-default-zen4 ran the sizing of an earlier run, and its 60 ms condition ran at
# 1.2 times the gap in its episodes' leads.
# 1. The default objective with 2 and 8 decoding streams: fixed-128 and dlfp-ct, 12
#    episodes each.
# 2. The tight objective with 2 streams: fixed-8, fixed-16 and dlfp-ct, 12 episodes; with
#    8 streams and the thin condition: fixed-8 and dlfp-ct, 12 episodes each.
# The arms are rotated per episode on one gateway. Run from the repository root, with
# nothing else running: bench/results/episodes-resized-zen4/run.sh. Resumes where it stopped.
# Its raw records were dropped after served.md and paced.md were made (DROPPED.md). Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-resized-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-resized-zen4
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-resized-zen4
set -euo pipefail
OUT=bench/results/episodes-resized-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_defaults
mkdir -p "$OUT"
begin_gateway_run
size_conditions
run_episodes "${CONDITIONS[0]}" fixed-128,dlfp-ct 12
run_episodes "${CONDITIONS[1]}" fixed-128,dlfp-ct 12
run_episodes "${CONDITIONS[2]}" fixed-8,fixed-16,dlfp-ct 12
run_episodes "${CONDITIONS[3]}" fixed-8,dlfp-ct 12
run_episodes "${CONDITIONS[4]}" fixed-8,dlfp-ct 12
end_gateway_run
