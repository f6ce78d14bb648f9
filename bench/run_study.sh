#!/usr/bin/env bash
# Runs a study (bench/studies/*.toml): the servers its parts need, one at a time (bench/lib.sh),
# each part's trials (`dlfp-gateway bench --study FILE --part NAME`, or `bench sweep`) or
# command, then its comparisons and summary. The steps come from
# `python -m bench.capacity.study_plan`.
# Resumable: a rerun skips every trial recorded in $OUT.
#   bench/run_study.sh bench/studies/capacity.toml              # what `make bench` runs
#   OUT=bench/results/capacity-pair-zen2 SEEDS=803 RATES=0.2 \
#       ARMS="dlfp-ct fixed-32 fixed-64" bench/run_study.sh bench/studies/capacity-pair.toml
# OUT: results folder (default: the study's `results`; name it by its CPU, e.g. -zen3).
# PARTS: the parts to run, by name, in that order (default: all, in the study's order).
# SEEDS, RATES, NREQ, ROTATE, ARMS (names from the study's [arms]): override the study in every
# part that runs. CALIBRATION: a calibration.json to copy in first (none: calibrate anew).
# PORT (8100), PY (.venv/bin/python), TOKENIZER (default: the embedded model's directory).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDY=${1:?usage: bench/run_study.sh STUDY.toml}
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8100}
TOKEN=bench-admin-token
OUT=${OUT:-$("$PY" -m bench.capacity.study_plan results "$STUDY")}
source bench/lib.sh
TOK=${TOKENIZER:-$("$PY" -c "from engine_worker.client.embedded_model import ensure_embedded_model as e; print(e())")}

overrides=()
[[ -n ${SEEDS:-} ]] && overrides+=(--seeds "$SEEDS")
[[ -n ${RATES:-} ]] && overrides+=(--rates "$RATES")
[[ -n ${NREQ:-} ]] && overrides+=(--num-requests "$NREQ")
[[ -n ${ROTATE:-} ]] && overrides+=(--rotate "$ROTATE")
for arm in ${ARMS:-}; do overrides+=(--arm "$arm"); done
plan_args=(--out "$OUT" --port "$PORT" --tokenizer "$TOK" --admin-token "$TOKEN" --parts "${PARTS:-}")
[[ -n ${CALIBRATION:-} ]] && plan_args+=(--calibration "$CALIBRATION")
# NOTE: the whole plan first, so that a bad study stops the script before any server starts.
plan=$("$PY" -m bench.capacity.study_plan plan "$STUDY" "${plan_args[@]}" -- "${overrides[@]}")

step() {  # step VERB ARGS...: one line of the plan (see bench/capacity/study_plan.py)
    local verb=$1
    shift
    case $verb in
        record-cpu) record_cpu "$1" ;;
        copy-missing) [[ -f $2 ]] || cp "$1" "$2" ;;
        serve) start_gateway "$@" ;;
        serve-vllm) start_server "$1" /v1/models "$PY" -m gateway bench vllm-server --model "$TOK" \
            --served-model-name smollm2-135m-instruct --port "$PORT" ;;
        save-admin) curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/admin/dlfp" > "$1" || true ;;
        stop) stop_server ;;
        gateway) "$PY" -m gateway "$@" ;;
        python) "$PY" "$@" ;;
        try) step "$@" || true ;;
        *) echo "unknown step: $verb" >&2; return 1 ;;
    esac
}

mapfile -t lines <<< "$plan"
for line in "${lines[@]}"; do
    [[ -z $line ]] && continue
    echo "== $(date +%T) $line" >&2
    eval "step $line"
done
echo "== $(date +%T) done" >&2
