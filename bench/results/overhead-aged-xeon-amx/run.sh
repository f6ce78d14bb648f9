#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority) on an Intel Xeon (family
# 6, model 167; AVX-512 and AMX): the tree before the margin's ratios aged out of its
# window (commit 6f43289, in a temporary worktree) and this tree, alternated three times.
# Run from the repository root, with nothing else running:
# bench/results/overhead-aged-xeon-amx/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-aged-xeon-amx BEFORE=6f43289 ROUNDS=3 \
    bench/results/overhead-cuts-zen4/run.sh
