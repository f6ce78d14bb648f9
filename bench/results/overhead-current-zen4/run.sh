#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority): the scheduler before the
# deadline plan's prefill rate had one home (commit a8f5e64, in a temporary worktree) and
# this tree, alternated three times. Run from the repository root, with nothing else
# running: bench/results/overhead-current-zen4/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-current-zen4 BEFORE=a8f5e64 ROUNDS=3 \
    bench/results/overhead-cuts-zen4/run.sh
