#!/usr/bin/env bash
# The sequence of episodes-slack-order-zen4 made shorter: 500 ms with 2 and 8 streams
# (fixed-128, dlfp-ct, dlfp), then 90 ms with 2 streams (fixed-16, dlfp-ct, dlfp), 3
# episodes each, on one gateway; the controller's state before the 90 ms condition
# (state-before-slo90.json.gz) and the step telemetry at the end (steps.json.gz). Sizing and
# conditions are episodes-slack-zen4's. Run from the repository root, with nothing else
# running: bench/results/episodes-slo90-after500-zen4/run.sh
set -euo pipefail
OUT=bench/results/episodes-slo90-after500-zen4
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
episodes() {  # episodes CONDITIONS ARMS
    "$PY" -m gateway bench episodes --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
        --tokenizer "$TOK" --conditions --only "$1" --arms "$2" --episodes 3 --results "$OUT" \
        2>&1 | tee -a "$OUT/logs/episodes-progress.log"
}
admin() { curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/admin/dlfp$1"; }
episodes slo500-d2,slo500-d8 fixed-128,dlfp-ct,dlfp
admin "" | gzip > "$OUT/state-before-slo90.json.gz"
episodes slo90-d2 fixed-16,dlfp-ct,dlfp
admin "/steps?since=0" | gzip > "$OUT/steps.json.gz"
stop_server
gzip -f "$OUT/logs/gateway.log"
