#!/usr/bin/env bash
# bench tiers on the scheduler of episodes-aimed-again-zen4 (aimed below its objective, the
# rate read after a floor step counting that step's attention), default settings, one
# gateway: a second run of tiers-aimed-zen4, seeds 1 and 2 (the calibrated static caps,
# dlfp-ct, dlfp and off, in a balanced order per seed). The calibration (seed 0, static caps
# 16 to 256) is tiers-delivery-zen4's, copied here, so the arms and the workload are those
# of tiers-aimed-zen4. Run from the repository root, with nothing else running, after
# episodes-aimed-again-zen4: bench/results/tiers-aimed-again-zen4/run.sh. Resumes where it
# stopped.
set -euo pipefail
OUT=bench/results/tiers-aimed-again-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_tiers_run bench/results/tiers-delivery-zen4
run_tiers
end_gateway_run
