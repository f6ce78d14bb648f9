#!/usr/bin/env bash
# cold-burst and slow-readers of bench abuse, "before" (the tree of commit 22abee2) and
# "after" (this tree), each scenario on a fresh gateway on port 8000, default settings.
# Run from the repository root, with nothing else running:
# bench/results/abuse-cold-zen4/run.sh
set -euo pipefail
OUT=bench/results/abuse-cold-zen4
PY=${PY:-$PWD/.venv/bin/python}
BEFORE=$(mktemp -d)
git archive 22abee2 gateway engine_worker | tar -x -C "$BEFORE"
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt"
run() {  # label, scenario, source tree
  (cd "$3" && PYTHONPATH="$3" "$PY" -m gateway serve > "$OUT/$1-$2.log" 2>&1) &
  local pid=$!
  until curl -sf http://127.0.0.1:8000/ready > /dev/null; do kill -0 "$pid"; sleep 1; done
  "$PY" -m gateway bench abuse --base-url http://127.0.0.1:8000 --scenarios "$2" \
      --results "$OUT/$1-$2.json" || true
  kill -INT "$pid"; wait "$pid" || true
}
for scenario in cold-burst slow-readers; do
  run before "$scenario" "$BEFORE"
  run after "$scenario" "$PWD"
done
