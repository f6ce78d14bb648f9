#!/usr/bin/env bash
# The paced floor as it stands (DeadlinePlan._paced_tokens with the increment at its
# margin, prefill_order.paced_deadline aiming at half the time left near a deadline),
# in the conditions of episodes-paced-zen4, which ran its first form: 60 ms and 90 ms
# with 8 decoding streams, fixed-8 and dlfp-ct, 12 episodes each. The arrivals' offsets
# are drawn by episode. Sizing and conditions are episodes-slack-zen4's (same machine).
# Run from the repository root, with nothing else running:
# bench/results/episodes-paced-again-zen4/run.sh. Resumes where it stopped. Tables:
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-paced-again-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-paced-again-zen4
set -euo pipefail
OUT=bench/results/episodes-paced-again-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo60-d8-thin fixed-8,dlfp-ct 12
run_episodes slo90-d8 fixed-8,dlfp-ct 12
end_gateway_run
