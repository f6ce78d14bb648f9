#!/usr/bin/env bash
# Every condition on the scheduler that aims below its objective: the plan's tails at the
# quantile of half the late share the streams' objective allows (0.995 for a P99
# objective) and the margin's correction aimed at that half (0.5% of deadline-bound steps
# late), and a floor step for the prompts' TTFT deadlines carrying only the tokens their
# pace needs. The conditions sized afresh at the run's start, as the aims define them
# (its own sizing.json and conditions.json), and the arms of episodes-resized-zen4:
# 1. The default objective with 2 and 8 decoding streams: fixed-128 and dlfp-ct, 12
#    episodes each.
# 2. The tight objective with 2 streams: fixed-8, fixed-16 and dlfp-ct, 12 episodes; with
#    8 streams and the thin condition: fixed-8 and dlfp-ct, 12 episodes each.
# The arms are rotated per episode on one gateway. Run from the repository root, with
# nothing else running: bench/results/episodes-aimed-zen4/run.sh. Resumes where it stopped.
# The step logs, gateway log and progress log were dropped after served.md, paced.md and the
# late-step counts of docs/results.md were made (git checkout b1cce605 --
# bench/results/episodes-aimed-zen4 restores them); the episode records were dropped later
# (git checkout 4710e16d -- bench/results/episodes-aimed-zen4 restores them: DROPPED.md).
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-aimed-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-aimed-zen4
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-aimed-zen4
set -euo pipefail
OUT=bench/results/episodes-aimed-zen4
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
