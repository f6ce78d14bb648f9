#!/usr/bin/env bash
# Interference episodes on the embedded model, default settings (dlfp-ct planning to the
# streams' deadlines), one gateway, in the four conditions of --conditions: the gateway's
# itl_slo_ms (500 ms) and min(3 x lone decode, 0.6 x 500 ms), each with 2 and 8 decoding
# streams; for off, five static caps, dlfp-ct, dlfp-ct planning to a target
# (dlfp-ct-target) and the sentinel, 6 episodes each. Then the scheduler's per-step
# overhead (bench overhead). Run from the repository root, with nothing else running:
# bench/results/episodes-deadline-zen1/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/episodes-deadline-zen1
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
URL=http://127.0.0.1:$PORT
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v2}
ARMS=off,fixed-16,fixed-32,dlfp-ct,fixed-64,fixed-128,dlfp-ct-target,fixed-256,dlfp-ct-repeat
mkdir -p "$OUT/logs"
lscpu > "$OUT/logs/lscpu.txt"
DLFP_ADMIN_TOKEN=$TOKEN DLFP_PORT=$PORT HF_HUB_OFFLINE=1 "$PY" -m gateway serve \
    >> "$OUT/logs/gateway.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID || true' EXIT
until curl -sf "$URL/ready" > /dev/null; do kill -0 "$PID"; sleep 1; done
"$PY" -m gateway bench episodes --base-url "$URL" --admin-token "$TOKEN" --tokenizer "$TOK" \
    --conditions --arms "$ARMS" --results "$OUT" 2>&1 | tee -a "$OUT/logs/episodes-progress.log"
kill -TERM $PID; wait $PID || true
trap - EXIT
# The lone decode step the episodes measured on this machine (conditions.json).
LONE_DECODE_MS=${LONE_DECODE_MS:-$("$PY" -c 'import json, sys
print(round(json.load(open(sys.argv[1]))["lone_decode_step_ms"]))' "$OUT/conditions.json")}
"$PY" -m gateway bench overhead --out "$OUT/overhead" --lone-decode-ms "$LONE_DECODE_MS" \
    --csv 2>&1 | tee -a "$OUT/logs/overhead-progress.log"
