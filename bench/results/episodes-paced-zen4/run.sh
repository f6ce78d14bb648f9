#!/usr/bin/env bash
# The floor paced to the prompts' TTFT deadlines where the streams' objective is out of
# reach (DeadlinePlan._paced_tokens, prefill_order.paced_deadline). 60 ms with 8 decoding
# streams, where no static cap is feasible and episodes-pending-zen4 and episodes-shed-zen4
# each had one arrival past its 30 s objective at the floor (33.9 s and 30.3 s): fixed-8
# and dlfp-ct, 12 episodes. 90 ms with 8 streams, where fixed-8 is feasible and dlfp-ct was
# undecided in episodes-shed-zen4's 6 episodes: fixed-8 and dlfp-ct, 12 episodes. The
# arrivals' offsets are drawn by episode. Sizing and conditions are episodes-slack-zen4's
# (same machine). Run from the repository root, with nothing else running:
# bench/results/episodes-paced-zen4/run.sh. Resumes where it stopped. The short arrivals
# against the step in flight:
# .venv/bin/python bench/results/episodes-room-zen4/analyse.py bench/results/episodes-paced-zen4
set -euo pipefail
OUT=bench/results/episodes-paced-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo60-d8-thin fixed-8,dlfp-ct 12
run_episodes slo90-d8 fixed-8,dlfp-ct 12
end_gateway_run
