#!/usr/bin/env bash
# Interference episodes on the embedded model, default settings, one gateway: the four
# conditions (itl_slo_ms 500 and min(3 x lone decode step, 300), each with 2 and 8
# decoding streams), every default arm, 6 episodes each. Run from the repository root,
# with nothing else running: bench/results/episodes-zen5/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/episodes-zen5
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
trap 'kill -TERM $PID; wait $PID || true' EXIT
until curl -sf "$URL/ready" > /dev/null; do kill -0 "$PID"; sleep 1; done
"$PY" -m gateway bench episodes --base-url "$URL" --admin-token "$TOKEN" --tokenizer "$TOK" \
    --results "$OUT" --conditions 2>&1 | tee -a "$OUT/logs/episodes-progress.log"
