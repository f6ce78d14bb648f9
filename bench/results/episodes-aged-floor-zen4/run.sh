#!/usr/bin/env bash
# The two conditions where no static cap was feasible in episodes-aged-zen4 (90 ms and
# 60 ms with 8 decoding streams), on the scheduler whose margin ratios leave its window
# 256 steps with prefill after them, floor steps counted (slack_model.MARGIN_MAX_AGE): that
# run's first form counted only the steps the fits learnt, and a margin of 4.65 held
# through its floor steps. The conditions and long prompts of episodes-aged-zen4 (its
# sizing.json and conditions.json copied); fixed-8 and dlfp-ct, 12 episodes each, rotated
# per episode on one gateway. Run from the repository root, with nothing else running:
# bench/results/episodes-aged-floor-zen4/run.sh. Resumes where it stopped.
# The step logs, gateway log, progress log and plots were dropped after served.md,
# paced.md and late.md were made
# (git checkout b9b6bac7 -- bench/results/episodes-aged-floor-zen4 restores them); the
# episode records stay.
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-aged-floor-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-aged-floor-zen4
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-aged-floor-zen4
# .venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-aged-floor-zen4
set -euo pipefail
OUT=bench/results/episodes-aged-floor-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-aged-zen4
run_episodes slo90-d8 fixed-8,dlfp-ct 12
run_episodes slo60-d8-thin fixed-8,dlfp-ct 12
end_gateway_run
