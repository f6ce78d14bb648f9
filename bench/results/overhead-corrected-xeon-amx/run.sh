#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority) on an Intel Xeon (family
# 6, model 167; AVX-512 and AMX): the tree before the margin's correction moved both ways
# and floor steps grew the trust bound (commit f93644a, in a temporary worktree) and this
# tree, alternated three times. Run from the repository root, with nothing else running:
# bench/results/overhead-corrected-xeon-amx/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-corrected-xeon-amx BEFORE=f93644a ROUNDS=3 \
    bench/results/overhead-cuts-zen4/run.sh
