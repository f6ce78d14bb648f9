#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority): the scheduler before the
# floor for TTFT deadlines (commit cf1b7b3, in a temporary worktree) and this tree (commit
# 0723a79), alternated twice. Run from the repository root, with nothing else running:
# bench/results/overhead-ttft-floor-zen4/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-ttft-floor-zen4 BEFORE=cf1b7b3 ROUNDS=2 \
    bench/results/overhead-cuts-zen4/run.sh
