#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority): the knee's tree (commit
# 3cec2a1, as in overhead-default-zen4) and this tree (the paced floor, step_rate_loss 0.02
# and the learnt speed kept out of the decodes' tail), alternated three times: a second
# sitting of overhead-default-zen4, whose first round missed the aim under priority on a
# noisy machine state. Run from the repository root, with nothing else running:
# bench/results/overhead-again-zen4/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-again-zen4 BEFORE=3cec2a1 ROUNDS=3 \
    bench/results/overhead-cuts-zen4/run.sh
