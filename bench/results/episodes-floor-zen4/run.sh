#!/usr/bin/env bash
# Interference episodes after the slack model learns floor steps that ran far faster than
# predicted (a model that left no slack held episodes-current-zen4's plan at the floor for
# whole episodes at 90 ms with 2 streams): every condition of `bench episodes
# --conditions` and the thin-slack one, dlfp-ct against the static caps that were the
# references in episodes-current-zen4 (fixed-128 at 500 ms; fixed-8 and fixed-16 at 90 ms;
# fixed-8 at 60 ms), 8 episodes (6 at 60 ms), each run's scheduler steps kept. Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-floor-zen4/run.sh. Resumes where it stopped.
# This run was stopped after the 90 ms conditions (the rule it measured was narrowed on
# their figures): the folder holds slo90-d2 and slo90-d8 only, run at 770a841.
set -euo pipefail
OUT=bench/results/episodes-floor-zen4
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
episodes() {  # episodes CONDITIONS ARMS EPISODES
    "$PY" -m gateway bench episodes --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
        --tokenizer "$TOK" --conditions --only "$1" --arms "$2" --episodes "$3" --results "$OUT" \
        2>&1 | tee -a "$OUT/logs/episodes-progress.log"
}
episodes slo90-d2,slo90-d8 fixed-8,fixed-16,dlfp-ct 8
episodes slo60-d8-thin fixed-8,dlfp-ct 6
episodes slo500-d2,slo500-d8 fixed-128,dlfp-ct 8
stop_server
gzip -f "$OUT/logs/gateway.log"
