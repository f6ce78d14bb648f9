#!/usr/bin/env bash
# Interference episodes, the two conditions of --conditions that episodes-slack-zen4 did not
# record: 90 ms with 8 decoding streams, and thin slack (60 ms, 1.7 x the decode-only step of
# 8 streams, with 8). The long prompts' length and the conditions are that folder's
# (sizing.json and conditions.json are copied from it); admission's no_slack shedding is off
# in every arm (the plan's admission_patch). Then the scheduler's per-step overhead (bench
# overhead, 32 running and 32 waiting). Run from the repository root, with nothing else
# running: bench/results/episodes-slack-thin-zen4/run.sh. Resumes where it stopped.
set -euo pipefail
OUT=bench/results/episodes-slack-thin-zen4
SIBLING=bench/results/episodes-slack-zen4
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
TOKEN=bench-admin
URL=http://127.0.0.1:$PORT
TOK=${TOK:-${XDG_CACHE_HOME:-$HOME/.cache}/dlfp-gateway/models/smollm2-135m-instruct-v3}
ARMS=off,fixed-8,fixed-16,fixed-32,dlfp-ct,fixed-64,fixed-128,dlfp,fixed-256
mkdir -p "$OUT/logs"
cp -n "$SIBLING/sizing.json" "$SIBLING/conditions.json" "$OUT/"
lscpu > "$OUT/logs/lscpu.txt"
# One line per start: a resumed run adds its commit, and its gateway log to the first one's.
git rev-parse HEAD >> "$OUT/logs/commit.txt"
if [ -f "$OUT/logs/gateway.log.gz" ]; then gunzip "$OUT/logs/gateway.log.gz"; fi
DLFP_ADMIN_TOKEN=$TOKEN DLFP_PORT=$PORT HF_HUB_OFFLINE=1 "$PY" -m gateway serve \
    >> "$OUT/logs/gateway.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID || true' EXIT
until curl -sf "$URL/ready" > /dev/null; do kill -0 "$PID"; sleep 1; done
"$PY" -m gateway bench episodes --base-url "$URL" --admin-token "$TOKEN" --tokenizer "$TOK" \
    --conditions --only slo90-d8,slo60-d8-thin --arms "$ARMS" --results "$OUT" 2>&1 \
    | tee -a "$OUT/logs/episodes-progress.log"
kill -TERM $PID; wait $PID || true
trap - EXIT
gzip -f "$OUT/logs/gateway.log"
"$PY" -m gateway bench overhead --waiting 32 --policies fcfs,priority --out "$OUT/overhead" \
    2>&1 | tee -a "$OUT/logs/overhead-progress.log"
