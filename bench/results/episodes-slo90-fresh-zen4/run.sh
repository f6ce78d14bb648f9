#!/usr/bin/env bash
# 90 ms with 2 streams on a freshly started gateway: dlfp-ct and fixed-16, 4 episodes, then
# the scheduler's step telemetry (steps.json.gz). In episodes-slack-order-zen4 the same
# condition ran after the 500 ms conditions on one gateway, and dlfp-ct behaved otherwise.
# Sizing and conditions are episodes-slack-zen4's. Run from the repository root, with
# nothing else running: bench/results/episodes-slo90-fresh-zen4/run.sh
set -euo pipefail
OUT=bench/results/episodes-slo90-fresh-zen4
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
export HF_HUB_OFFLINE=1
start_gateway gateway
"$PY" -m gateway bench episodes --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
    --tokenizer "$TOK" --conditions --only slo90-d2 --arms dlfp-ct,fixed-16 --episodes 4 \
    --results "$OUT" 2>&1 | tee -a "$OUT/logs/episodes-progress.log"
curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/admin/dlfp/steps?since=0" \
    | gzip > "$OUT/steps.json.gz"
stop_server
gzip -f "$OUT/logs/gateway.log"
