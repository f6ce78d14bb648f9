#!/usr/bin/env bash
# Prefill throughput of the embedded model in bf16 and float32 on this CPU (the dtype aim).
# Two gateway starts; writes bench/results/dtype/{bfloat16,float32}.json (+ host.json).
set -u
cd "$(dirname "$0")/.."
mkdir -p bench/results/dtype
TOK=$(.venv/bin/python -c "from engine_worker.embedded_model import ensure_embedded_model as e; print(e())")
for dtype in bfloat16 float32; do
  DLFP_DTYPE=$dtype .venv/bin/python -m gateway serve --port 8400 > bench/results/dtype/gateway-$dtype.log 2>&1 &
  PID=$!
  for _ in $(seq 900); do curl -sf http://127.0.0.1:8400/ready >/dev/null && break; sleep 1; done
  .venv/bin/python -m bench.probe_prefill --base-url http://127.0.0.1:8400 --tokenizer "$TOK" --out bench/results/dtype/$dtype.json
  kill -TERM $PID; wait $PID
done
