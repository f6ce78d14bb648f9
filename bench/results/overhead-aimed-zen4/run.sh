#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority): the tree the README's
# step-cost figures were measured on (commit 5ce6611, in a temporary worktree) and this tree
# (aimed below its objective, a floor step's rate counting its attention), alternated three
# times. Run from the repository root, with nothing else running, after
# tiers-aimed-again-zen4: bench/results/overhead-aimed-zen4/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-aimed-zen4 BEFORE=5ce6611 ROUNDS=3 \
    bench/results/overhead-cuts-zen4/run.sh
