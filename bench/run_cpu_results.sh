#!/usr/bin/env bash
# Reproduces the README's CPU results: SmolLM2-135M on a 2-core machine. About 90 minutes on
# the AVX-512 machine; on a slower CPU the protocol is first scaled to LOAD of the measured
# prefill throughput (--calibrate; a fast machine runs it as written), so it stays bounded.
# Resumable: a rerun skips the trials already recorded in $OUT.
#   bench/run_cpu_results.sh            # NREQ=30 SEEDS=801,802,803 OUT=bench/results/cpu
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/cpu}
SEEDS=${SEEDS:-801,802,803}
SWEEP_SEED=${SWEEP_SEED:-801}
NREQ=${NREQ:-30}
LOAD=${LOAD:-0.45}
PORT=${PORT:-8100}
TOKEN=bench-admin-token
source bench/lib.sh
mkdir -p "$OUT/logs"
TOK=$($PY -c "from engine_worker.embedded_model import ensure_embedded_model as e; print(e())")
BENCH=($PY -m gateway bench --base-url "http://127.0.0.1:$PORT" --protocol cpu
       --num-requests "$NREQ" --calibrate "$LOAD" --tokenizer "$TOK" --admin-token "$TOKEN"
       --results "$OUT")

# 1. One gateway; the arms switch its controller at runtime (PATCH /admin/dlfp), and a
#    fresh cache_salt per trial keeps one arm's prompts out of another's prefix cache.
start_gateway gateway
"${BENCH[@]}" --seeds "$SEEDS" \
    --arm 'off={"controller":"off"}' \
    --arm 'off-repeat={"controller":"off"}' \
    --arm 'fixed-64={"controller":"fixed","fixed_cap_tokens":64}' \
    --arm 'fixed-128={"controller":"fixed","fixed_cap_tokens":128}' \
    --arm 'dlfp={"controller":"dlfp"}' \
    --arm 'dlfp-ct={"controller":"dlfp-ct"}' \
    --arm 'dlfp-ct-250={"controller":"dlfp-ct","target_ms":250}'
# The static sweep, one seed: a larger fixed cap on the same gateway ...
"${BENCH[@]}" --seeds "$SWEEP_SEED" \
    --arm 'fixed-256={"controller":"fixed","fixed_cap_tokens":256}'
curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/admin/dlfp/steps" > "$OUT/logs/steps-last.json" || true
stop_server

# 2. The baseline a user would pick instead: vLLM's own OpenAI server, same engine settings.
start_server vllm /v1/models $PY -m gateway bench vllm-server --model "$TOK" \
    --served-model-name smollm2-135m-instruct --port "$PORT"
"${BENCH[@]}" --seeds "$SEEDS" --arm vllm
stop_server

# 3. vLLM's own static knob at the same caps (an engine argument: one start each).
for thr in 64 128 256; do
    start_gateway "vllm-thr-$thr" --controller off --engine-arg "long_prefill_token_threshold=$thr"
    "${BENCH[@]}" --seeds "$SWEEP_SEED" --arm "vllm-thr-$thr" --admin-patch '{"controller":"off"}'
    stop_server
done

# 4. Paired comparisons over the seeds.
for arm in off-repeat fixed-64 fixed-128 dlfp dlfp-ct dlfp-ct-250 vllm; do
    $PY -m gateway bench compare --results "$OUT" --baseline off --candidate "$arm"
done
$PY -m gateway bench summary --results "$OUT"
echo "== $(date +%T) done" >&2
