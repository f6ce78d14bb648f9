#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority): the scheduler before each
# step was stopped at the knee of its rate (commit d3eaa38, in a temporary worktree) and
# this tree, alternated three times. Run from the repository root, with nothing else
# running: bench/results/overhead-knee-zen4/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-knee-zen4 BEFORE=d3eaa38 ROUNDS=3 \
    bench/results/overhead-cuts-zen4/run.sh
