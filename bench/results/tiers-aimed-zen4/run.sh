#!/usr/bin/env bash
# bench tiers on the embedded model with the scheduler that aims below its objective (its
# tails at the quantile of half the late share the objective allows, the margin's
# correction aimed at that half, a floor step for TTFT deadlines carrying only the tokens
# their pace needs), default settings, one gateway: the measured run over seeds 1 and 2
# (the calibrated static caps, dlfp-ct, dlfp and off, in a balanced order per seed). The
# calibration (seed 0, static caps 16 to 256) is tiers-delivery-zen4's, copied here
# (calibration.json and calibration/), so the arms and the workload are those of
# tiers-delivery-zen4, tiers-knee-zen4 and tiers-default-zen4. Run from the repository
# root, with nothing else running: bench/results/tiers-aimed-zen4/run.sh. Resumes where it
# stopped.
set -euo pipefail
OUT=bench/results/tiers-aimed-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_tiers_run bench/results/tiers-delivery-zen4
run_tiers
end_gateway_run
