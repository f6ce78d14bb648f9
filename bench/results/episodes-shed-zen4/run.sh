#!/usr/bin/env bash
# Admission's no_slack shedding, which every other episodes run turns off: dlfp-ct-shed
# (dlfp-ct with the shedding on for its runs alone) beside dlfp-ct and fixed-8, where the
# decodes leave little or no slack: 60 ms with 8 decoding streams, 12 episodes (two
# Williams cycles of the three arms), and 90 ms with 8 streams, 6 episodes (one cycle),
# the arrivals' offsets drawn by episode.
# The shedding refuses a new request while most planned steps carry no prefill or only a
# floor's and an admitted prompt goes before it in the engine's order. Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-shed-zen4/run.sh. Resumes where it
# stopped. What was refused, and the TTFTs of what was served:
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py <folder> > bench/results/episodes-shed-zen4/shed.md
# where <folder> holds the records (dropped from this one: DROPPED.md), e.g.
# git archive 9ee9139 bench/results/episodes-shed-zen4 | tar -x -C /tmp/shed, then
# <folder> is /tmp/shed/bench/results/episodes-shed-zen4.
set -euo pipefail
OUT=bench/results/episodes-shed-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo60-d8-thin fixed-8,dlfp-ct,dlfp-ct-shed 12
run_episodes slo90-d8 fixed-8,dlfp-ct,dlfp-ct-shed 6
end_gateway_run
