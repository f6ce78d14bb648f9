#!/usr/bin/env bash
# Where a short prompt's TTFT goes at 500 ms with 8 streams: 2 interference episodes of
# fixed-128 (the best feasible static cap there) and dlfp-ct, then the scheduler's step
# telemetry of the whole run (GET /admin/dlfp/steps, saved as steps.json.gz). The condition
# and sizing are episodes-slack-zen4's (copied from it). Run from the repository root, with
# nothing else running: bench/results/steps-slo500-zen4/run.sh
set -euo pipefail
OUT=bench/results/steps-slo500-zen4
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
    --tokenizer "$TOK" --conditions --only slo500-d8 --arms fixed-128,dlfp-ct --episodes 2 \
    --results "$OUT" 2>&1 | tee -a "$OUT/logs/episodes-progress.log"
curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/admin/dlfp/steps?since=0" \
    | gzip > "$OUT/steps.json.gz"
stop_server
gzip -f "$OUT/logs/gateway.log"
