#!/usr/bin/env bash
# Interference episodes at 90 ms with 2 and 8 streams after the slack model learns a floor
# step only where the model put it past the streams' objective and it ran in under 1/1.5
# of that: dlfp-ct against fixed-16 (2 streams) and fixed-8 (8 streams), the references
# in episodes-current-zen4, 8 episodes, each run's scheduler steps kept. Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-floor-narrow-zen4/run.sh. Resumes where it
# stopped.
set -euo pipefail
OUT=bench/results/episodes-floor-narrow-zen4
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
episodes slo90-d2 fixed-16,dlfp-ct 8
episodes slo90-d8 fixed-8,dlfp-ct 8
stop_server
gzip -f "$OUT/logs/gateway.log"
