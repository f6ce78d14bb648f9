"""The CPU protocol sized to the machine: the arithmetic, and a run against a fake endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.lib.calibrate import offered_prefill_tokens_per_s, scaled
from bench.lib.workload import WorkloadConfig

CPU_PROTOCOL = WorkloadConfig(num_requests=30, num_warmup=2, rate_rps=0.2)


def test_offered_load_of_the_protocol_as_written() -> None:
    # 0.2 request/s x (half 2,000-token, half 70-token prompts).
    assert offered_prefill_tokens_per_s(CPU_PROTOCOL) == pytest.approx(207.0)


@pytest.mark.parametrize(
    ("tokens_per_s", "long_max", "rate"),
    # AVX2 float32 (~136 tokens/s), AVX2 bf16 (~33), a machine faster than the protocol.
    [(136.0, 813, 0.2), (33.0, 450, 0.0803), (2000.0, 3000, 0.2)],
)
def test_long_prompts_then_the_rate_shrink_to_the_measured_throughput(
    tokens_per_s: float, long_max: int, rate: float
) -> None:
    calibration = scaled(CPU_PROTOCOL, 0.45, tokens_per_s)
    assert (calibration.long_max_tokens, calibration.rate_rps) == (long_max, rate)
    workload = WorkloadConfig(
        30,
        2,
        calibration.rate_rps,
        long_min_tokens=calibration.long_min_tokens,
        long_max_tokens=calibration.long_max_tokens,
    )
    offered = offered_prefill_tokens_per_s(workload)
    if calibration.scale < 1.0:
        assert offered == pytest.approx(0.45 * tokens_per_s, rel=0.01)
    else:  # never grown past the protocol as written
        assert offered == offered_prefill_tokens_per_s(CPU_PROTOCOL)


def test_calibration_file_round_trips(tmp_path: Path) -> None:
    from dataclasses import asdict

    from bench.lib.calibrate import Calibration

    calibration = scaled(CPU_PROTOCOL, 0.45, 136.0)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(asdict(calibration)))
    assert Calibration(**json.loads(path.read_text())) == calibration


def test_capacity_interpolates_at_ninety_percent() -> None:
    from bench.capacity.sweep import capacity

    assert capacity([(0.1, 1.0), (0.2, 0.95), (0.3, 0.75)]) == {
        "capacity_rps": pytest.approx(0.225),
        "capacity_bound": "interpolated",
    }
    assert capacity([(0.1, 1.0), (0.2, 0.92)])["capacity_bound"] == "at_least"
    assert capacity([(0.1, 0.5)]) == {"capacity_rps": None, "capacity_bound": "below_lowest_rate"}


def test_capacity_label_names_the_bound() -> None:
    from bench.capacity.sweep import capacity, capacity_label

    def entry(points: list[tuple[float, float]]) -> dict[str, object]:
        return {"rates": {f"{r:g}": {} for r, _ in points}, **capacity(points)}

    assert capacity_label(entry([(0.15, 1.0), (0.25, 0.8)])) == "0.200"
    assert capacity_label(entry([(0.15, 1.0), (0.25, 0.95)])) == ">= 0.25"
    assert capacity_label(entry([(0.15, 0.5), (0.25, 0.2)])) == "< 0.15"


def test_capacity_by_seed_uses_only_the_rates_each_seed_ran_at() -> None:
    from bench.capacity.sweep import capacity_by_seed, seed_capacities

    # Seed 1 ran at both rates and crosses 90% between them; seed 2 only at the lower
    # rate, where it already missed.
    by_rate = {
        0.1: {"slo_attainment_by_seed": {"1": 1.0, "2": 0.5}},
        0.2: {"slo_attainment_by_seed": {"1": 0.8}},
    }
    caps = capacity_by_seed(by_rate)
    assert caps["1"]["capacity_rps"] == pytest.approx(0.15)
    assert caps["2"]["capacity_bound"] == "below_lowest_rate"
    entry = {"capacity_by_seed": caps}
    assert seed_capacities(entry) == "1: 0.150, 2: < 0.1"
