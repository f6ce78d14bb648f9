#!/usr/bin/env bash
# The TTFT issue's measurement: `off` against the default `dlfp-ct` (SRPF order and the
# feed-forward cap), seeds 801-803 paired, arm order rotated per seed, the controller reset
# before every trial. The protocol is sized by hand for the CPU it runs on (see README,
# "Results"): LONG_MIN..LONG_MAX-token long prompts, half of the requests, at RATE req/s.
# Resumable: a rerun skips the trials already recorded in $OUT.
#   bench/run_ttft_results.sh     # OUT=bench/results/cpu-ttft RATE=0.15 LONG_MIN=300 LONG_MAX=900
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/cpu-ttft}
SEEDS=${SEEDS:-801,802,803}
NREQ=${NREQ:-30}
RATE=${RATE:-0.15}
LONG_MIN=${LONG_MIN:-300}
LONG_MAX=${LONG_MAX:-900}
PORT=${PORT:-8100}
TOKEN=bench-admin-token
mkdir -p "$OUT/logs"
lscpu > "$OUT/logs/lscpu.txt"
TOK=$($PY -c "from engine_worker.embedded_model import ensure_embedded_model as e; print(e())")
BENCH=($PY -m gateway bench --base-url "http://127.0.0.1:$PORT" --protocol cpu
       --num-requests "$NREQ" --rate "$RATE" --long-min-tokens "$LONG_MIN"
       --long-max-tokens "$LONG_MAX" --tokenizer "$TOK" --admin-token "$TOKEN" --results "$OUT")

DLFP_ADMIN_TOKEN=$TOKEN $PY -m gateway serve --port "$PORT" > "$OUT/logs/gateway.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2> /dev/null || true; wait $PID 2> /dev/null || true' EXIT
for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/ready" > /dev/null && break
    kill -0 "$PID" 2> /dev/null || { tail -30 "$OUT/logs/gateway.log"; exit 1; }
    sleep 1
done
curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/admin/dlfp" > "$OUT/logs/admin-dlfp-start.json"
"${BENCH[@]}" --seeds "$SEEDS" \
    --arm 'off={"controller":"off"}' \
    --arm 'dlfp-ct={"controller":"dlfp-ct"}' \
    ${EXTRA_ARMS:-}
$PY -m gateway bench compare --results "$OUT" --baseline off --candidate dlfp-ct
$PY -m gateway bench summary --results "$OUT" --plots
