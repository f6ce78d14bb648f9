#!/usr/bin/env bash
# bench tiers on an Intel Xeon (family 6, model 167; AVX-512 and AMX, bf16), on the
# scheduler of episodes-aged-xeon-amx (the margin's ratios aged out of its window, floor
# steps counted), default settings, one gateway: the calibration (seed 0, static caps 16 to
# 256) made afresh on this machine, then seeds 1 and 2 (the calibrated static caps,
# dlfp-ct, dlfp and off, in a balanced order per seed). Run from the repository root, with
# nothing else running, after episodes-aged-xeon-amx: bench/results/tiers-aged-xeon-amx/run.sh.
# Resumes where it stopped.
set -euo pipefail
OUT=bench/results/tiers-aged-xeon-amx
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_defaults
mkdir -p "$OUT"
begin_gateway_run
run_tiers
end_gateway_run
