#!/usr/bin/env bash
# Interference episodes on the current scheduler (the at-risk order that goes ahead only of
# later deadlines, the deadline plan's floors) in the conditions where a static cap was
# feasible and dlfp-ct's feasibility undecided or its short prompts slower: 500 ms with 2
# and 8 streams against fixed-128, 90 ms with 2 streams against fixed-16 (the best feasible
# caps there in episodes-slack-zen4, whose sizing and conditions are copied), with the
# paper's dlfp; 8 episodes each. Run from the repository root, with nothing else running:
# bench/results/episodes-slack-order-zen4/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/episodes-slack-order-zen4
SIBLING=bench/results/episodes-slack-zen4
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v3}
# shellcheck source=bench/lib.sh
source bench/lib.sh
mkdir -p "$OUT/logs"
cp -n "$SIBLING/sizing.json" "$SIBLING/conditions.json" "$OUT/"
record_cpu "$OUT"
git rev-parse HEAD >> "$OUT/logs/commit.txt"
if [ -f "$OUT/logs/gateway.log.gz" ]; then gunzip "$OUT/logs/gateway.log.gz"; fi
export HF_HUB_OFFLINE=1
start_gateway gateway
episodes() {  # episodes CONDITIONS ARMS
    "$PY" -m gateway bench episodes --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
        --tokenizer "$TOK" --conditions --only "$1" --arms "$2" --episodes 8 --results "$OUT" \
        2>&1 | tee -a "$OUT/logs/episodes-progress.log"
}
episodes slo500-d2,slo500-d8 fixed-128,dlfp-ct,dlfp
episodes slo90-d2 fixed-16,dlfp-ct,dlfp
stop_server
gzip -f "$OUT/logs/gateway.log"
