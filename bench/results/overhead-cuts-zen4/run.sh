#!/usr/bin/env bash
# bench overhead at 32 running and 32 waiting (fcfs and priority): the scheduler before the
# cuts to a capped step's bookkeeping (commit 99c8bc9, checked out in a temporary worktree)
# and this tree, alternated three times (before, after, before, after, ...). Each run pairs
# every arm with vLLM's own Scheduler in blocks of 20 steps. Run from the repository root,
# with nothing else running: bench/results/overhead-cuts-zen4/run.sh (OUT, BEFORE and ROUNDS
# name another folder, tree and count: overhead-ttft-floor-zen4/run.sh uses them).
set -euo pipefail
OUT=${OUT:-$PWD/bench/results/overhead-cuts-zen4}
PY=${PY:-$PWD/.venv/bin/python}
BEFORE=${BEFORE:-99c8bc9}
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt"
git rev-parse HEAD > "$OUT/commit.txt"
tree=$(mktemp -d)
git worktree add -q --detach "$tree" "$BEFORE"
trap 'git worktree remove --force "$tree"' EXIT
for round in $(seq "${ROUNDS:-3}"); do
    (cd "$tree" && PYTHONPATH="$tree" "$PY" -m gateway bench overhead --waiting 32 \
        --out "$OUT/before-$round" | tail -7 | tee "$OUT/before-$round.txt")
    "$PY" -m gateway bench overhead --waiting 32 --out "$OUT/after-$round" \
        | tail -7 | tee "$OUT/after-$round.txt"
done
