#!/usr/bin/env bash
# The calibrated CPU protocol at its 100 measured requests a trial (issue 13): `off` and the
# default `dlfp-ct`, seeds 801-803 paired, arm order rotated per seed, the controller reset
# before every trial, then the paired comparison. CALIBRATION=FILE reuses another folder's
# calibration.json (the same prompt lengths as that folder's runs); unset, the protocol is
# calibrated anew. Resumable: a rerun skips the trials already recorded in $OUT.
#   bench/run_protocol_results.sh   # OUT=bench/results/cpu-n100 NREQ=100 LOAD=0.45
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/cpu-n100}
SEEDS=${SEEDS:-801,802,803}
NREQ=${NREQ:-100}
LOAD=${LOAD:-0.45}
PORT=${PORT:-8100}
TOKEN=bench-admin-token
source bench/lib.sh
record_cpu "$OUT"
if [[ -n ${CALIBRATION:-} && ! -f $OUT/calibration.json ]]; then cp "$CALIBRATION" "$OUT/"; fi
TOK=$($PY -c "from engine_worker.embedded_model import ensure_embedded_model as e; print(e())")

start_gateway gateway
$PY -m gateway bench --base-url "http://127.0.0.1:$PORT" --protocol cpu --num-requests "$NREQ" \
    --calibrate "$LOAD" --tokenizer "$TOK" --admin-token "$TOKEN" --results "$OUT" \
    --seeds "$SEEDS" --arm 'off={"controller":"off"}' --arm 'dlfp-ct={"controller":"dlfp-ct"}'
$PY -m gateway bench compare --results "$OUT" --baseline off --candidate dlfp-ct
$PY -m gateway bench summary --results "$OUT" --plots
