#!/usr/bin/env bash
# The TTFT issue's measurement on the calibrated CPU protocol: `off`, the default `dlfp-ct`
# (SRPF order, feed-forward cap, auto target; observation `busy`, the default when these
# trials began, before the batch-queue work made it `completion`), and `dlfp-ct` as it was before (FCFS order,
# feedback only, 300 ms, cap quantum 32), seeds 801-803 paired, arm order rotated per
# seed, the controller reset before every trial. The long prompts (and, if needed, the
# rate) are scaled to LOAD of this machine's measured prefill throughput first
# (calibration.json). Resumable: a rerun skips the trials already recorded in $OUT.
#   bench/run_ttft_results.sh        # OUT=bench/results/cpu-ttft LOAD=0.45 NREQ=30
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/cpu-ttft}
SEEDS=${SEEDS:-801,802,803}
NREQ=${NREQ:-30}
LOAD=${LOAD:-0.45}
PORT=${PORT:-8100}
TOKEN=bench-admin-token
source bench/lib.sh
record_cpu "$OUT"
TOK=$($PY -c "from engine_worker.embedded_model import ensure_embedded_model as e; print(e())")

start_gateway gateway
$PY -m gateway bench --base-url "http://127.0.0.1:$PORT" --protocol cpu --num-requests "$NREQ" \
    --calibrate "$LOAD" --tokenizer "$TOK" --admin-token "$TOKEN" --results "$OUT" \
    --seeds "$SEEDS" \
    --arm 'off={"controller":"off"}' \
    --arm 'dlfp-ct={"controller":"dlfp-ct","observation":"busy"}' \
    --arm 'dlfp-ct-before={"controller":"dlfp-ct","prefill_order":"fcfs","feedforward":false,"target_ms":300,"min_cap_tokens":32,"step_tokens":32,"observation":"busy"}'
for arm in dlfp-ct dlfp-ct-before; do
    $PY -m gateway bench compare --results "$OUT" --baseline off --candidate "$arm"
done
$PY -m gateway bench summary --results "$OUT" --plots
