#!/usr/bin/env bash
# A second run of the condition episodes-knee-zen4 left undecided for short prompts: 500 ms
# with 2 decoding streams, default dlfp-ct (each step stopped at the knee of its rate)
# against fixed-128, 36 episodes (the two arms' order alternating), the arrivals' offsets
# drawn by episode (episodes 0 to 23 send what episodes-knee-zen4's did, an hour later;
# 24 to 35 are new). Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-knee-again-zen4/run.sh. Resumes where it
# stopped. The short arrivals against the step in flight:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-knee-again-zen4
# (analysis.md, made before the step logs and the gateway log were dropped to keep
# bench/results under 25 MB: recover them with
# git checkout ee98b16c -- bench/results/episodes-knee-again-zen4).
set -euo pipefail
OUT=bench/results/episodes-knee-again-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo500-d2 fixed-128,dlfp-ct 36
end_gateway_run
