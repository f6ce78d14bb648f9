#!/usr/bin/env bash
# A second run of episodes-jitter-zen4's design (commit in logs/commit.txt): the same scheduler,
# the arrivals' offsets drawn by episode (--offset-jitter-s 0.5, the default), and the
# gateway's start-up heap frozen out of the garbage collector's reach once the engine has
# started (gateway/startup_heap.py). Every condition of the design's aims: 500 ms with 2
# streams (10 episodes) and 8 streams against fixed-128; 90 ms with 2 and 8 streams, and
# 60 ms with 8, against fixed-8 and fixed-16; 8 episodes where not said; the arms in a
# balanced (Williams) order, each run's scheduler steps kept (steps/). Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-heap-frozen-zen4/run.sh. Resumes where it
# stopped. Per-episode floor rules, late steps, the longest TTFTs and the step in flight
# when each short arrival was sent:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-heap-frozen-zen4
# (analysis.md). The static arms' step logs at 90 and 60 ms
# (steps/episode-<e>/fixed-<n>.json.gz) were dropped to keep bench/results under 25 MB:
# recover them with git checkout 6aa6c733 -- bench/results/episodes-heap-frozen-zen4
# The other step logs and the gateway log were dropped later (analysis.md made before);
# the same command recovers them.
# The commands are episodes-jitter-zen4's, run into this folder.
set -euo pipefail
OUT=bench/results/episodes-heap-frozen-zen4 exec bench/results/episodes-jitter-zen4/run.sh
