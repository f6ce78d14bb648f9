#!/usr/bin/env bash
# Issue 16's measurement: the embedded model on a real engine whose scheduler runs ahead of
# execution (vLLM's step_with_batch_queue, here with two pipeline stages on the CPU), serving
# `off`, `dlfp` (scheduler-call interval) and `dlfp-ct` with each observation. The step
# telemetry of every trial is kept; bench/observation_study.py then lines each mixed step up
# with the inter-token gaps the streams saw. Resumable: a rerun skips recorded trials.
#   bench/run_batch_queue_results.sh   # OUT=bench/results/cpu-batch-queue SEEDS=801 NREQ=20
# The 700 ms arms: a target the stream gap can meet here (the CPU default, 300 ms, cannot:
# two decode-only steps already take 210-255 ms). EXTRA_ARMS: more --arm options.
# BIND (VLLM_CPU_OMP_THREADS_BIND) and OMP_THREADS override the gateway's one-core-per-stage
# binding; see README, "A scheduler that runs ahead of execution", for why the committed run
# used BIND=nobind OMP_THREADS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/cpu-batch-queue}
SEEDS=${SEEDS:-801}
NREQ=${NREQ:-20}
RATE=${RATE:-0.25}
MAXTOK=${MAXTOK:-128}
LONG_MIN=${LONG_MIN:-300}
LONG_MAX=${LONG_MAX:-900}
PORT=${PORT:-8300}
PP=${PP:-2}
TOKEN=bench-admin-token
source bench/lib.sh
record_cpu "$OUT"
TOK=$($PY -c "from engine_worker.embedded_model import ensure_embedded_model as e; print(e())")
BENCH=($PY -m gateway bench --base-url "http://127.0.0.1:$PORT" --protocol cpu
       --num-requests "$NREQ" --rate "$RATE" --max-tokens "$MAXTOK" --long-min-tokens "$LONG_MIN"
       --long-max-tokens "$LONG_MAX" --tokenizer "$TOK" --admin-token "$TOKEN" --results "$OUT")
[ -n "${BIND:-}" ] && export VLLM_CPU_OMP_THREADS_BIND=$BIND
[ -n "${OMP_THREADS:-}" ] && export OMP_NUM_THREADS=$OMP_THREADS

start_gateway gateway --engine-arg "pipeline_parallel_size=$PP"
curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/admin/dlfp" > "$OUT/logs/admin-dlfp-start.json"
"${BENCH[@]}" --seeds "$SEEDS" \
    --arm 'off={"controller":"off"}' \
    --arm 'dlfp={"controller":"dlfp"}' \
    --arm 'dlfp-ct={"controller":"dlfp-ct"}' \
    --arm 'dlfp-ct-busy={"controller":"dlfp-ct","observation":"busy"}' \
    --arm 'dlfp-t700={"controller":"dlfp","target_ms":700}' \
    --arm 'dlfp-ct-t700={"controller":"dlfp-ct","target_ms":700}' \
    ${EXTRA_ARMS:-}
for arm in dlfp dlfp-ct dlfp-ct-busy dlfp-t700 dlfp-ct-t700; do
    $PY -m gateway bench compare --results "$OUT" --baseline off --candidate $arm || true
done
$PY -m gateway bench summary --results "$OUT" --plots
$PY -m bench.observation_study --results "$OUT"
