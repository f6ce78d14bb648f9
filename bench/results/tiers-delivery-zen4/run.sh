#!/usr/bin/env bash
# bench tiers on the embedded model on the current scheduler (the delivery share, 0.05 by
# default, of each step's slack left unplanned), default settings, one gateway: the
# measured run over seeds 1 and 2 (the calibrated static caps, dlfp-ct, dlfp and off, in a
# balanced order per seed). The calibration (seed 0, static caps 16 to 256) is
# tiers-busy-documents-zen4's, copied from tiers-nonneg-zen4 (calibration.json and
# calibration/), so the arms and the workload are those of tiers-busy-order-zen4 and
# tiers-nonneg-zen4. Run from the repository root, with nothing else running:
# bench/results/tiers-delivery-zen4/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/tiers-delivery-zen4
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v3}
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_gateway_run
"$PY" -m gateway bench tiers --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
    --tokenizer "$TOK" --results "$OUT" 2>&1 | tee -a "$OUT/logs/tiers-progress.log"
end_gateway_run
