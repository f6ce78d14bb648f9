#!/usr/bin/env bash
# Interference episodes on the current scheduler with each arrival's offset moved later by
# a draw of the episode's seed below 0.5 s (--offset-jitter-s, the default; every arm
# alike). At fixed offsets the first short arrival met the start of dlfp-ct's second step
# in 8 of 10 episodes at 500 ms with 2 streams (episodes-room-zen4), as the arms' step
# lengths repeat from episode to episode. Every condition of the design's aims: 500 ms with
# 2 streams (10 episodes) and 8 streams against fixed-128; 90 ms with 2 and 8 streams, and
# 60 ms with 8, against fixed-8 and fixed-16; 8 episodes where not said; the arms in a
# balanced (Williams) order, each run's scheduler steps kept (steps/). Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-jitter-zen4/run.sh. Resumes where it
# stopped. Per-episode floor rules, late steps and the longest TTFTs:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-jitter-zen4
# (analysis.md). The static arms' step logs at 90 and 60 ms
# (steps/episode-<e>/fixed-<n>.json.gz), then dlfp-ct's at 90 ms, were dropped to keep
# bench/results under 25 MB: recover them with
# git checkout 0d652c99 -- bench/results/episodes-jitter-zen4
# (analysis.md, made before, still has their rows; rerunning analyse.py now leaves them out).
set -euo pipefail
OUT=${OUT:-bench/results/episodes-jitter-zen4}  # episodes-heap-frozen-zen4 runs this too
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
THIN=fixed-8,fixed-16,dlfp-ct
run_episodes slo500-d2 fixed-128,dlfp-ct 10
run_episodes slo500-d8 fixed-128,dlfp-ct 8
run_episodes slo90-d2,slo90-d8 "$THIN" 8
run_episodes slo60-d8-thin "$THIN" 8
end_gateway_run
