#!/usr/bin/env bash
# Every condition on the scheduler whose margin ratios leave its window once the increment
# fit has taken 256 steps since them (slack_model.MARGIN_MAX_AGE), with the arms, episode
# counts and protocol of episodes-aimed-again-zen4, the conditions sized afresh at the
# run's start (its own sizing.json and conditions.json):
# 1. The default objective with 2 and 8 decoding streams: fixed-128 and dlfp-ct, 24
#    episodes each.
# 2. The tight objective with 2 streams: fixed-8, fixed-16 and dlfp-ct, 12 episodes; with
#    8 streams and the thin condition: fixed-8 and dlfp-ct, 12 episodes each.
# The arms are rotated per episode on one gateway. Run from the repository root, with
# nothing else running: bench/results/episodes-aged-zen4/run.sh. Resumes where it stopped.
# The step logs, gateway log, progress log and plots were dropped after served.md,
# paced.md, late.md and analysis.md were made
# (git checkout 755509ed -- bench/results/episodes-aged-zen4 restores them); the
# episode records stay.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-aged-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-aged-zen4
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-aged-zen4
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-aged-zen4
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-aged-zen4
set -euo pipefail
OUT=bench/results/episodes-aged-zen4
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
