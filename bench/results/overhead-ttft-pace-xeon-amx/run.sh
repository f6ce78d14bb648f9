#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority) on an Intel Xeon (family
# 6, model 167; AVX-512 and AMX): the tree before the floor for TTFT deadlines paced beyond
# min_cap_tokens (commit bbf53ce, in a temporary worktree) and this tree, alternated three
# times. Run from the repository root, with nothing else running:
# bench/results/overhead-ttft-pace-xeon-amx/run.sh
set -euo pipefail
OUT=$PWD/bench/results/overhead-ttft-pace-xeon-amx BEFORE=bbf53ce ROUNDS=3 \
    bench/results/overhead-cuts-zen4/run.sh
