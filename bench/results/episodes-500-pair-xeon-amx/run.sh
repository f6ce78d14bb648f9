#!/usr/bin/env bash
# 500 ms with 8 and 2 streams on an Intel Xeon (family 6, model 167; AVX-512 and AMX,
# bf16): the tree before the margin's correction moved both ways and floor steps grew the
# trust bound (commit f93644a, in a temporary worktree; into before/) and this tree (into
# after/), one gateway each per condition, in the order before, after at 8 streams, then
# after, before at 2 streams; fixed-128, fixed-256 and dlfp-ct rotated per episode, 8
# episodes, admission's TTFT check off, the long prompts and objectives of
# episodes-corrected-xeon-amx. Run from the repository root, with nothing else running:
# bench/results/episodes-500-pair-xeon-amx/run.sh. Tables:
# dlfp-gateway bench episodes --results bench/results/episodes-500-pair-xeon-amx/before
# dlfp-gateway bench episodes --results bench/results/episodes-500-pair-xeon-amx/after
# The step logs, gateway logs and short/long plots were dropped after the tables were made
# (git checkout 5ac3cfa8 -- bench/results/episodes-500-pair-xeon-amx restores them).
set -euo pipefail
ROOT=$PWD
HERE=$ROOT/bench/results/episodes-500-pair-xeon-amx
SIZED=$ROOT/bench/results/episodes-corrected-xeon-amx
export PY=${PY:-$ROOT/.venv/bin/python}
tree=$(mktemp -d)
git worktree add -q --detach "$tree" f93644a
trap 'git worktree remove --force "$tree"' EXIT

one() {  # one TREE NAME CONDITION: a gateway from TREE, CONDITION's episodes into $HERE/NAME
    (
        cd "$1"
        export PYTHONPATH=$1 OUT=$HERE/$2
        # shellcheck source=bench/lib.sh
        source bench/lib.sh
        begin_episodes_run "$SIZED"
        slo_check_off
        run_episodes "$3" fixed-128,fixed-256,dlfp-ct 8
        end_gateway_run
    )
}

one "$tree" before slo500-d8
one "$ROOT" after slo500-d8
one "$ROOT" after slo500-d2
one "$tree" before slo500-d2
# The summaries again from the repository root, so that they name their folders relatively
# (added after the run, whose summaries were re-analysed so by hand).
for folder in "$HERE"/*/slo500-d*; do
    "$PY" -m gateway bench episodes --results "${folder#"$ROOT"/}" > /dev/null
done
