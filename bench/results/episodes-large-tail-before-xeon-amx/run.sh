#!/usr/bin/env bash
# The tree before the large steps' tail (e8ec8122: every step planned at the margin of
# every ratio), in the same sitting as episodes-large-tail-xeon-amx, on the same Intel
# Xeon (family 6, model 167; AVX-512 and AMX, bf16): 500 ms with 8 and 2 streams, the long
# prompts' size copied from that run's sizing, the same arms, 8 episodes, rotated per
# episode on one gateway, admission's TTFT check off. Run from the root of a worktree at
# e8ec8122 with this script copied into it, with nothing else running:
# git worktree add /work/before-wt e8ec8122
# mkdir -p /work/before-wt/bench/results/episodes-large-tail-before-xeon-amx
# cp bench/results/episodes-large-tail-xeon-amx/{sizing,conditions}.json \
#     bench/results/episodes-large-tail-before-xeon-amx/run.sh \
#     /work/before-wt/bench/results/episodes-large-tail-before-xeon-amx/
# (cd /work/before-wt && bench/results/episodes-large-tail-before-xeon-amx/run.sh)
# Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-large-tail-before-xeon-amx
# The step logs, gateway log and progress log and its plots were dropped after the tables
# were made (git checkout c3a64576 -- bench/results/episodes-large-tail-before-xeon-amx restores them); the
# episode records stay.
set -euo pipefail
OUT=bench/results/episodes-large-tail-before-xeon-amx
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_defaults
mkdir -p "$OUT"
begin_gateway_run
size_conditions
# NOTE: not lib.sh's slo_check_off: the lib.sh of e8ec8122, which runs this, has none.
curl -sf -X PATCH -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \
    -d '{"slo_check": false}' "http://127.0.0.1:$PORT/admin/admission" > "$OUT/logs/admission.json"
run_episodes "${CONDITIONS[1]}" fixed-128,fixed-256,fixed-512,dlfp-ct 8
run_episodes "${CONDITIONS[0]}" fixed-128,fixed-256,fixed-512,dlfp-ct 8
end_gateway_run
