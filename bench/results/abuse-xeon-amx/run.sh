#!/usr/bin/env bash
# The abuse aims on the embedded model, default settings: a burst of 300 streams against
# the gateway before the admission changes (BEFORE, a tree of commit 9ab756b:
# `git archive 9ab756b gateway engine_worker | tar -x -C $BEFORE`) and after (this tree),
# one gateway at a time in the order before, after, after, before (WARM=1: a second burst
# on each gateway); then 300 surrogate stops, and two non-reading clients at
# max_concurrent 2 (STALLED_MAX_CONCURRENT), after only.
# Run from the repository root: bench/results/abuse-xeon-amx/run.sh
# (PARTS="burst stalled": those parts only; OUT: another folder for the records)
set -euo pipefail
OUT=${OUT:-bench/results/abuse-xeon-amx}
BEFORE=${BEFORE:-/tmp/before}
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8100}
TOKEN=abuse-admin
URL=http://127.0.0.1:$PORT
lscpu > "$OUT/logs/lscpu.txt"
PID=
stop() { if [[ -n $PID ]]; then kill -TERM "$PID"; wait "$PID" || true; PID=; fi; }
trap stop EXIT
start() {  # start NAME DIR [ENV...]: a gateway from DIR's code, until /ready
    local name=$1 dir=$2; shift 2
    echo "== $(date -u +%T) start $name" >&2
    (cd "$dir" && exec env DLFP_ADMIN_TOKEN=$TOKEN DLFP_PORT=$PORT HF_HUB_OFFLINE=1 "$@" \
        "$OLDPWD/$PY" -m gateway serve) >> "$OUT/logs/$name.log" 2>&1 &
    PID=$!
    until curl -sf "$URL/ready" > /dev/null; do kill -0 "$PID"; sleep 1; done
    for i in $(seq 8); do  # the same warm-up for every arm: 8 first tokens measured
        curl -sf "$URL/v1/chat/completions" -H 'content-type: application/json' \
            -d "{\"model\":\"smollm2-135m-instruct\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"Warm-up $i: say hello.\"}]}" > /dev/null
    done
}
abuse() { "$PY" -m gateway bench abuse --base-url "$URL" --admin-token "$TOKEN" "$@"; }
PARTS=${PARTS:-burst surrogate stalled}
n=0
for arm in ${ARMS:-before after after before}; do
    [[ $PARTS == *burst* ]] || break
    n=$((n + 1))
    dir=$([[ $arm == before ]] && echo "$BEFORE" || pwd)
    start "$arm-$n" "$dir"
    abuse --scenarios burst --results "$OUT/burst-$n-$arm.json" | tee "$OUT/burst-$n-$arm.txt" || true
    if [[ -n ${WARM:-} ]]; then  # a second burst on the same gateway, 5 s after the first
        sleep 5
        abuse --scenarios burst --results "$OUT/burst-$n-$arm-warm.json" \
            | tee "$OUT/burst-$n-$arm-warm.txt" || true
    fi
    stop
done
if [[ $PARTS == *surrogate* ]]; then
    start after-surrogate "$(pwd)"
    abuse --scenarios surrogate-stop,reply-too-big,deep-schema --results "$OUT/surrogate.json" \
        | tee "$OUT/surrogate.txt" || true
    stop
fi
if [[ $PARTS == *stalled* ]]; then
    slots=${STALLED_MAX_CONCURRENT:-2}
    start "after-stalled-$slots" "$(pwd)" DLFP_MAX_CONCURRENT="$slots"
    abuse --scenarios stalled-readers --results "$OUT/stalled-$slots.json" | tee "$OUT/stalled-$slots.txt" || true
    stop
fi
