#!/usr/bin/env bash
# Interference episodes at thin slack (60 ms, 1.7 x the decode-only step of 8 streams, with
# 8), where no static cap holds the objective: the deadline plan with its floors (no slack,
# objective lost, a prompt's end without slack) and the at-risk order that goes ahead only
# of later deadlines, against the tightest static caps and the paper's controller. Then the
# scheduler's per-step overhead (bench overhead, 32 running and 32 waiting). The long prompts'
# length and the conditions are episodes-slack-zen4's (sizing.json and conditions.json are
# copied from it); admission's no_slack shedding is off in every arm (the plan's
# admission_patch). Run from the repository root, with nothing else running:
# bench/results/episodes-slack-end-zen4/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/episodes-slack-end-zen4
SIBLING=bench/results/episodes-slack-zen4
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v3}
ARMS=fixed-8,fixed-16,dlfp-ct,fixed-32,dlfp
# shellcheck source=bench/lib.sh
source bench/lib.sh
mkdir -p "$OUT/logs"
cp -n "$SIBLING/sizing.json" "$SIBLING/conditions.json" "$OUT/"
record_cpu "$OUT"
git rev-parse HEAD >> "$OUT/logs/commit.txt"
if [ -f "$OUT/logs/gateway.log.gz" ]; then gunzip "$OUT/logs/gateway.log.gz"; fi
export HF_HUB_OFFLINE=1
start_gateway gateway
"$PY" -m gateway bench episodes --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
    --tokenizer "$TOK" --conditions --only slo60-d8-thin --arms "$ARMS" --results "$OUT" 2>&1 \
    | tee -a "$OUT/logs/episodes-progress.log"
stop_server
gzip -f "$OUT/logs/gateway.log"
"$PY" -m gateway bench overhead --waiting 32 --policies fcfs,priority --out "$OUT/overhead" \
    2>&1 | tee -a "$OUT/logs/overhead-progress.log"
