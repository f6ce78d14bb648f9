#!/usr/bin/env bash
# bench tenants (trickle, weights 3:1, token-rate) on one gateway with the embedded model,
# default settings and the two tenants of tenants.toml, then bench admission-cost.
# Run from the repository root, with nothing else running:
# bench/results/tenants-zen4/run.sh
set -euo pipefail
OUT=bench/results/tenants-zen4
PY=${PY:-$PWD/.venv/bin/python}
TOKEN=tenants-bench-admin
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt"
DLFP_TENANTS_FILE="$OUT/tenants.toml" DLFP_ADMIN_TOKEN="$TOKEN" \
    "$PY" -m gateway serve > "$OUT/gateway.log" 2>&1 &
pid=$!
until curl -sf http://127.0.0.1:8000/ready > /dev/null; do kill -0 "$pid"; sleep 1; done
"$PY" -m gateway bench tenants --base-url http://127.0.0.1:8000 --admin-token "$TOKEN" \
    --tenant search=sk-search-bench --tenant batch=sk-batch-bench \
    --scenarios trickle,weights,token-rate --out "$OUT/tenants.json" || true
kill -INT "$pid"; wait "$pid" || true
"$PY" -m gateway bench admission-cost --out "$OUT" | tee "$OUT/admission-cost.txt"
gzip -f "$OUT/gateway.log"
