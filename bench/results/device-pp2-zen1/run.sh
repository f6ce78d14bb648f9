#!/usr/bin/env bash
# The device observation on the CPU engine that runs ahead of execution: two pipeline
# stages (a batch queue of 2), the embedded SmolLM2-135M, dlfp-ct with observation device,
# through bench gpu-check on the CPU (its checks that need a GPU are reported, not
# asserted). Run from the repository root, with nothing else running:
# bench/results/device-pp2-zen1/run.sh
set -euo pipefail
OUT=bench/results/device-pp2-zen1
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v2}
lscpu > "$OUT/lscpu.txt"
DLFP_ENGINE_ARGS='{"pipeline_parallel_size": "2", "enable_prefix_caching": "false"}' \
DLFP_DTYPE=float32 DLFP_STARTUP_FIT_S=0 \
    "$PY" -m gateway bench gpu-check --device cpu --model "$MODEL" --out "$OUT" \
    --decoders 4 --decode-tokens 48 --long-words 300 --episodes 2 --long-prefill-s 2
