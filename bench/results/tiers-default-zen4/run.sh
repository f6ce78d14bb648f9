#!/usr/bin/env bash
# bench tiers on the embedded model with the default scheduler (5ce6611: each step stopped
# at the knee of its prefill rate at step_rate_loss 0.02, floor steps paced to the TTFT
# deadlines where the streams' objective is out of reach, a decode-only step learnt as the
# machine's new speed kept out of the decodes' tail), default settings, one gateway: the
# measured run over seeds 1 and 2 (the calibrated static caps, dlfp-ct, dlfp and off, in a
# balanced order per seed). The calibration (seed 0, static caps 16 to 256) is
# tiers-delivery-zen4's, copied here (calibration.json and calibration/), so the arms and
# the workload are those of tiers-delivery-zen4 and tiers-knee-zen4. Run from the
# repository root, with nothing else running: bench/results/tiers-default-zen4/run.sh.
# Resumes where it stopped.
set -euo pipefail
OUT=bench/results/tiers-default-zen4
# shellcheck source=bench/lib.sh
source bench/lib.sh
begin_tiers_run bench/results/tiers-delivery-zen4
run_tiers
end_gateway_run
