#!/usr/bin/env bash
# Interference episodes on the embedded model, default settings, one gateway, 2 decoding
# streams: the gateway's itl_slo_ms (500 ms) and a tight objective (TIGHT_MS, 3 x the
# lone decode step the first condition measured, rounded down to 10 ms), for off, five
# static caps, dlfp-ct and its sentinel, 6 episodes each. Run from the repository root,
# with nothing else running: TIGHT_MS=60 bench/results/episodes-xeon-amx/run.sh.
# Resumes where it stopped.
set -euo pipefail
OUT=bench/results/episodes-xeon-amx
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
URL=http://127.0.0.1:$PORT
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v2}
ARMS=off,fixed-16,fixed-32,fixed-64,fixed-128,fixed-256,dlfp-ct,dlfp-ct-repeat
mkdir -p "$OUT/logs"
lscpu > "$OUT/logs/lscpu.txt"
DLFP_ADMIN_TOKEN=$TOKEN DLFP_PORT=$PORT HF_HUB_OFFLINE=1 "$PY" -m gateway serve \
    >> "$OUT/logs/gateway.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID; wait $PID || true' EXIT
until curl -sf "$URL/ready" > /dev/null; do kill -0 "$PID"; sleep 1; done
episodes() {
    "$PY" -m gateway bench episodes --base-url "$URL" --admin-token "$TOKEN" --tokenizer "$TOK" \
        --decoders 2 --arms "$ARMS" "$@" 2>&1 | tee -a "$OUT/logs/episodes-progress.log"
}
episodes --results "$OUT/slo500-d2"
[[ -n ${TIGHT_MS:-} ]] && episodes --results "$OUT/slo$TIGHT_MS-d2" --itl-slo-ms "$TIGHT_MS"
exit 0
