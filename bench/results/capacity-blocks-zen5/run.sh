#!/usr/bin/env bash
# Interleaved capacity on the CPU protocol: off, dlfp-ct and the two best static caps of the
# episodes at the default objective (fixed-128, fixed-64), at two rates around dlfp-ct's
# 90% goodput (placed by the one-block pilot in pilot/), blocks of 30 requests per arm
# (the first 6 warm-up), 5 blocks per arm and rate: 120 measured requests each. Run from
# the repository root against a gateway with default settings and DLFP_ADMIN_TOKEN=bench-admin
# on port 8000, nothing else running: bench/results/capacity-blocks-zen5/run.sh
set -euo pipefail
OUT=bench/results/capacity-blocks-zen5
PY=${PY:-.venv/bin/python}
URL=${URL:-http://127.0.0.1:8000}
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v2}
common=(--base-url "$URL" --protocol cpu --tokenizer "$TOK" --admin-token bench-admin --block 30)
if [[ ${PARTS:-all} != main ]]; then
    "$PY" -m gateway bench sweep "${common[@]}" --results "$OUT/pilot" --rates 0.4,0.8,1.2,1.6 \
        --num-requests 30 --arm 'dlfp-ct={"controller":"dlfp-ct"}'
fi
"$PY" -m gateway bench sweep "${common[@]}" --results "$OUT" --rates 1.2,2.0 --num-requests 150 \
    --arm 'off={"controller":"off"}' --arm 'dlfp-ct={"controller":"dlfp-ct"}' \
    --arm 'fixed-128={"controller":"fixed","fixed_cap_tokens":128}' \
    --arm 'fixed-64={"controller":"fixed","fixed_cap_tokens":64}' 2>&1 | tee -a "$OUT/logs/sweep-progress.log"
