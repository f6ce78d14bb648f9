#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority): the scheduler measured in
# overhead-knee-zen4 (commit 3cec2a1: the knee, before the paced floor and the rate loss of
# 0.02) and this tree, alternated twice. Run from the repository root, with nothing else
# running: bench/results/overhead-default-zen4/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-default-zen4 BEFORE=3cec2a1 ROUNDS=2 \
    bench/results/overhead-cuts-zen4/run.sh
