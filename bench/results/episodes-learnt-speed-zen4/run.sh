#!/usr/bin/env bash
# The decodes' tail without the steps learnt as the machine's new speed. In
# episodes-default-zen4 at 90 ms with 2 decoding streams a slow spell of decode-only steps,
# learnt as the speed, stayed in that tail for three episodes and sent every planned step
# at the floor (no_slack); the scheduler now keeps such steps out of it.
# 1. 90 ms with 2 streams, fixed-8 (the only static cap within there) and dlfp-ct, 16
#    episodes: the aims' two clauses, and the floor steps by rule (paced.py).
# 2. 500 ms with 2 streams, fixed-128 and dlfp-ct, 12 episodes: the generous case, where
#    the change should not matter.
# The arms are rotated per episode on one gateway. Sizing and conditions are
# episodes-slack-zen4's (same machine). Run from the repository root, with nothing else
# running: bench/results/episodes-learnt-speed-zen4/run.sh. Resumes where it stopped.
# Tables: dlfp-gateway bench episodes --results bench/results/episodes-learnt-speed-zen4
# .venv/bin/python bench/results/episodes-shed-zen4/shed.py bench/results/episodes-learnt-speed-zen4
# .venv/bin/python bench/results/episodes-paced-zen4/paced.py bench/results/episodes-learnt-speed-zen4
set -euo pipefail
OUT=bench/results/episodes-learnt-speed-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_episodes_run bench/results/episodes-slack-zen4
run_episodes slo90-d2 fixed-8,dlfp-ct 16
run_episodes slo500-d2 fixed-128,dlfp-ct 12
end_gateway_run
