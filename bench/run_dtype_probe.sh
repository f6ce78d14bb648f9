#!/usr/bin/env bash
# Prefill throughput of the embedded model in bf16 and float32 on this CPU (the dtype aim).
# Two gateway starts; writes bench/results/dtype/{bfloat16,float32}.json (+ host.json).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=bench/results/dtype
LOGS=$OUT
PORT=${PORT:-8400}
TOKEN=bench-admin-token
source bench/lib.sh
mkdir -p "$OUT"
TOK=$($PY -c "from engine_worker.embedded_model import ensure_embedded_model as e; print(e())")
for dtype in bfloat16 float32; do
    export DLFP_DTYPE=$dtype
    start_gateway "gateway-$dtype"
    $PY -m bench.probe_prefill --base-url "http://127.0.0.1:$PORT" --tokenizer "$TOK" \
        --out "$OUT/$dtype.json"
    stop_server
done
