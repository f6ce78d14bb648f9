#!/usr/bin/env bash
# Admission counting what is left of each pending prompt (gateway/pending_prefill.py) in
# the two conditions episodes-knee-zen4 left open. 60 ms with 8 decoding streams, where
# no static cap is feasible: fixed-8, fixed-16 and dlfp-ct, 12 episodes (two Williams
# cycles of the three arms); episodes-knee-zen4 had one arrival of dlfp-ct's 8 episodes
# refused by admission's TTFT check (and one of dlfp-ct-full's). 500 ms with 2 streams:
# fixed-128 and dlfp-ct, 36 episodes, the same arrivals as episodes-knee-again-zen4's, a
# third run of the short prompts' clause. The arrivals' offsets are drawn by episode.
# Sizing and conditions are episodes-slack-zen4's (same machine). Run from the repository
# root, with nothing else running: bench/results/episodes-pending-zen4/run.sh. Resumes
# where it stopped. The short arrivals against the step in flight:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-pending-zen4
# (analysis.md, made before the step logs and the gateway log were dropped to keep
# bench/results under 25 MB: recover them with
# git checkout af02996 -- bench/results/episodes-pending-zen4).
set -euo pipefail
OUT=bench/results/episodes-pending-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo60-d8-thin fixed-8,fixed-16,dlfp-ct 12
run_episodes slo500-d2 fixed-128,dlfp-ct 36
end_gateway_run
