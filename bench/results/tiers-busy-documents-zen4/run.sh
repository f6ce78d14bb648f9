#!/usr/bin/env bash
# bench tiers on the embedded model (the workload with batch streams beside the documents),
# default settings, one gateway: the calibration (seed 0, static caps 16 to 256), then the measured run over seeds 1 and 2 (the calibrated static
# caps, dlfp-ct, dlfp and off, rotated per seed). Run from the repository root, with nothing
# else running: bench/results/tiers-busy-documents-zen4/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/tiers-busy-documents-zen4
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
URL=http://127.0.0.1:$PORT
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v3}
mkdir -p "$OUT/logs"
lscpu > "$OUT/logs/lscpu.txt"
git rev-parse HEAD >> "$OUT/logs/commit.txt"
if [ -f "$OUT/logs/gateway.log.gz" ]; then gunzip "$OUT/logs/gateway.log.gz"; fi
DLFP_ADMIN_TOKEN=$TOKEN DLFP_PORT=$PORT HF_HUB_OFFLINE=1 "$PY" -m gateway serve \
    >> "$OUT/logs/gateway.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID || true' EXIT
until curl -sf "$URL/ready" > /dev/null; do kill -0 "$PID"; sleep 1; done
"$PY" -m gateway bench tiers --base-url "$URL" --admin-token "$TOKEN" --tokenizer "$TOK" \
    --results "$OUT" 2>&1 | tee -a "$OUT/logs/tiers-progress.log"
kill -TERM $PID; wait $PID || true
trap - EXIT
gzip -f "$OUT/logs/gateway.log"
