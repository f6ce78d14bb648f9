#!/usr/bin/env bash
# Interleaved capacity on the calibrated CPU protocol: off, dlfp-ct and the two best static
# caps of the episodes on this CPU (fixed-32 at 500 ms with 2 streams, fixed-16 with 8), at
# 0.15 and 0.25 request/s; blocks of 30 requests per arm (the first 6 warm-up), 2 blocks per
# arm and rate; an arm below 80% goodput at 0.15 is not run at 0.25. --calibrate 0.45
# shrinks the long prompts toward 45% of this CPU's lone prefill throughput at 0.2
# request/s, to no less than 0.15 of their length (calibration.json: 150 to 450 tokens).
# One gateway with default settings, nothing else running:
# bench/results/capacity-blocks-zen1/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/capacity-blocks-zen1
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
URL=http://127.0.0.1:$PORT
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v2}
mkdir -p "$OUT/logs"
lscpu > "$OUT/logs/lscpu.txt"
DLFP_ADMIN_TOKEN=$TOKEN DLFP_PORT=$PORT HF_HUB_OFFLINE=1 "$PY" -m gateway serve \
    >> "$OUT/logs/gateway.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID || true' EXIT
until curl -sf "$URL/ready" > /dev/null; do kill -0 "$PID"; sleep 1; done
"$PY" -m gateway bench sweep --base-url "$URL" --protocol cpu --tokenizer "$TOK" \
    --admin-token "$TOKEN" --results "$OUT" --calibrate 0.45 --block 30 --num-requests 60 \
    --rates 0.15,0.25 --stop-below 0.8 \
    --arm 'off={"controller":"off"}' --arm 'dlfp-ct={"controller":"dlfp-ct"}' \
    --arm 'fixed-32={"controller":"fixed","fixed_cap_tokens":32}' \
    --arm 'fixed-16={"controller":"fixed","fixed_cap_tokens":16}' \
    2>&1 | tee -a "$OUT/logs/sweep-progress.log"
