# Sourced by bench/run_study.sh: one server at a time in the background, its output
# appended to $LOGS/NAME.log (default $OUT/logs), waited for until it answers, and stopped
# when the script exits. Needs PORT and OUT; start_gateway also needs PY and TOKEN.
# READY_TIMEOUT_S (default 900) bounds the wait for a start.
SERVER_PID=

start_server() {  # start_server NAME READY_PATH CMD...: run CMD until GET READY_PATH answers
    local name=$1 path=$2 log
    shift 2
    log=${LOGS:-$OUT/logs}/$name.log
    echo "== $(date +%T) starting $name" >&2
    "$@" >> "$log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq "${READY_TIMEOUT_S:-900}"); do
        curl -sf "http://127.0.0.1:$PORT$path" > /dev/null && return 0
        kill -0 "$SERVER_PID" 2> /dev/null || { tail -30 "$log" >&2; SERVER_PID=; exit 1; }
        sleep 1
    done
    echo "$name did not come up" >&2
    exit 1
}

start_gateway() {  # start_gateway NAME SERVE_ARGS...: `gateway serve` on $PORT, admin token $TOKEN
    local name=$1
    shift
    start_server "$name" /ready env DLFP_ADMIN_TOKEN="$TOKEN" "$PY" -m gateway serve --port "$PORT" "$@"
}

record_cpu() {  # record_cpu DIR: lscpu in DIR/logs/lscpu.txt, never over another CPU's
    # NOTE: a results folder outlives the machine that began it; a later run on another
    # CPU resuming into it adds a dated lscpu beside the first rather than replacing it.
    local logs=$1/logs now
    mkdir -p "$logs"
    now=$(lscpu)
    if [[ ! -f $logs/lscpu.txt ]]; then
        printf '%s\n' "$now" > "$logs/lscpu.txt"
    elif [[ $now != "$(cat "$logs/lscpu.txt")" ]]; then
        printf '%s\n' "$now" > "$logs/lscpu-$(date -u +%Y%m%dT%H%M%SZ).txt"
    fi
}

stop_server() {  # stop the running server, if any, and wait for it to exit
    [[ -z $SERVER_PID ]] && return 0
    kill -TERM "$SERVER_PID" 2> /dev/null || true
    wait "$SERVER_PID" 2> /dev/null || true
    SERVER_PID=
}

trap stop_server EXIT
trap 'exit 143' TERM

begin_gateway_run() {  # begin_gateway_run: a results script's start, into $OUT: its logs
    # folder, its CPU and commit recorded, a resumed run's gateway log unpacked, the model
    # read offline, and `gateway serve` started. Needs PY, PORT, TOKEN and OUT.
    mkdir -p "$OUT/logs"
    record_cpu "$OUT"
    git rev-parse HEAD >> "$OUT/logs/commit.txt"
    if [[ -f $OUT/logs/gateway.log.gz ]]; then gunzip "$OUT/logs/gateway.log.gz"; fi
    export HF_HUB_OFFLINE=1
    start_gateway gateway
}

end_gateway_run() {  # end_gateway_run: stop the gateway and pack its log
    stop_server
    gzip -f "$OUT/logs/gateway.log"
}

bench_defaults() {  # bench_defaults: PY, PORT and TOK at their defaults where unset, and
    # TOKEN the bench's admin token, for a results script that starts its own gateway.
    PY=${PY:-.venv/bin/python}
    PORT=${PORT:-8000}
    TOKEN=bench-admin
    TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v3}
}

begin_episodes_run() {  # begin_episodes_run SIBLING: an episodes script's start, into $OUT:
    # bench_defaults, the sizing and conditions of the results folder SIBLING copied unless
    # $OUT has its own (the same long prompts and objectives on the same machine), then
    # begin_gateway_run.
    bench_defaults
    mkdir -p "$OUT"
    cp -n "$1/sizing.json" "$1/conditions.json" "$OUT/"
    begin_gateway_run
}

begin_tiers_run() {  # begin_tiers_run SIBLING: a tiers script's start, into $OUT:
    # bench_defaults, the calibration of the results folder SIBLING copied unless $OUT has
    # its own (the same arms and workload), then begin_gateway_run.
    bench_defaults
    mkdir -p "$OUT"
    [ -e "$OUT/calibration.json" ] || cp -r "$1/calibration.json" "$1/calibration" "$OUT/"
    begin_gateway_run
}

size_conditions() {  # size_conditions: an episodes script's conditions sized at the run's
    # start, into $OUT/sizing.json and $OUT/conditions.json unless they are there, and
    # their names in CONDITIONS, in order. Needs the gateway started (begin_gateway_run).
    # NOTE: the sizing and conditions only (written before the conditions are read; no
    # condition is named "sizing", so the command stops there with an error, as expected).
    if [[ ! -f $OUT/conditions.json ]]; then
        run_episodes sizing fixed-8 1 || true
    fi
    mapfile -t CONDITIONS < <("$PY" -c 'import json, sys
print("\n".join(json.load(open(sys.argv[1]))["conditions"]))' "$OUT/conditions.json")
}

slo_check_off() {  # slo_check_off: admission's TTFT check off on the gateway at $PORT for the
    # rest of its run, so that every arm serves the same arrivals; the answer in
    # $OUT/logs/admission.json. Needs PORT, TOKEN and OUT.
    curl -sf -X PATCH -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \
        -d '{"slo_check": false}' "http://127.0.0.1:$PORT/admin/admission" > "$OUT/logs/admission.json"
}

run_episodes() {  # run_episodes CONDITIONS ARMS EPISODES: `bench episodes --conditions --only
    # CONDITIONS` on the gateway at $PORT into $OUT, its progress appended to
    # $OUT/logs/episodes-progress.log. Needs PY, PORT, TOKEN, TOK and OUT.
    "$PY" -m gateway bench episodes --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
        --tokenizer "$TOK" --conditions --only "$1" --arms "$2" --episodes "$3" --results "$OUT" \
        2>&1 | tee -a "$OUT/logs/episodes-progress.log"
}

run_tiers() {  # run_tiers: `bench tiers` on the gateway at $PORT into $OUT, its progress
    # appended to $OUT/logs/tiers-progress.log. Needs PY, PORT, TOKEN, TOK and OUT.
    "$PY" -m gateway bench tiers --base-url "http://127.0.0.1:$PORT" --admin-token "$TOKEN" \
        --tokenizer "$TOK" --results "$OUT" 2>&1 | tee -a "$OUT/logs/tiers-progress.log"
}
