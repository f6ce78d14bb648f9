#!/usr/bin/env bash
# Every condition of the design's aims with the paced floor as it stands: 500 ms with 2
# decoding streams against fixed-128, 36 episodes; 500 ms with 8 streams against
# fixed-128, 24 episodes; 90 ms with 2 streams against fixed-16, 12 episodes; 90 ms with 8
# streams and 60 ms with 8 against fixed-8, 16 and 12 episodes. Each reference is the
# static cap that earlier runs on this machine found best feasible (fixed-128, fixed-16) or
# with the tightest gaps (fixed-8); the arrivals' offsets are drawn by episode. Sizing and
# conditions are episodes-slack-zen4's (same machine). Run from the repository root, with
# nothing else running: bench/results/episodes-paced-every-zen4/run.sh. Resumes where it
# stopped. Tables: dlfp-gateway bench episodes --results bench/results/episodes-paced-every-zen4
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-paced-every-zen4
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-paced-every-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-paced-every-zen4
# .venv/bin/python bench/results/episodes-paced-every-zen4/pooled.py (every run at 500 ms, 2 streams)
set -euo pipefail
OUT=bench/results/episodes-paced-every-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo500-d2 fixed-128,dlfp-ct 36
run_episodes slo500-d8 fixed-128,dlfp-ct 24
run_episodes slo90-d2 fixed-16,dlfp-ct 12
run_episodes slo90-d8 fixed-8,dlfp-ct 16
run_episodes slo60-d8-thin fixed-8,dlfp-ct 12
end_gateway_run
