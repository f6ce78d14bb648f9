#!/usr/bin/env bash
# A full collection in the gateway's process once the real engine has started (embedded
# model, this machine's defaults), timed 7 times before and 7 after freeze_startup_heap
# (gateway/startup_heap.py). Run from the repository root, with nothing else running:
# bench/results/startup-heap-zen4/run.sh (results.json and logs/ beside it).
set -euo pipefail
OUT=bench/results/startup-heap-zen4
PY=${PY:-.venv/bin/python}
# shellcheck source=bench/lib.sh
source bench/lib.sh
record_cpu "$OUT"
git rev-parse HEAD >> "$OUT/logs/commit.txt"
HF_HUB_OFFLINE=1 "$PY" "$OUT/measure.py" 2> "$OUT/logs/engine.log" | tee "$OUT/logs/measure.txt"
