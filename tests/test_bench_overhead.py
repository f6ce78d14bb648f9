"""``bench overhead`` on a few steps: every cell and arm, a well-formed record, and capping.

Quick tier: vLLM's real ``Scheduler`` and ``DLFPScheduler`` are built in-process (no
engine process, no model run), as in ``tests/test_prefill_order.py``. The figures are
not judged here (timings belong in the benchmark); what the arms did is.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from bench.cli import main
from bench.harness.overhead import AIM_WAITING, ARMS, BASELINE

WAITING = (0, AIM_WAITING, 256)
POLICIES = ("fcfs", "priority")
NUM_STEPS = 12


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    out = tmp_path_factory.mktemp("overhead")
    argv = ["overhead", "--steps", str(NUM_STEPS), "--warmup-steps", "8", "--block-steps", "2"]
    argv += ["--waiting", ",".join(map(str, WAITING)), "--out", str(out), "--csv"]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(argv) == 0
    record = json.loads((out / "overhead.json").read_text(encoding="utf-8"))
    assert (out / "steps.csv").read_text(encoding="utf-8").count("\n") == 1 + len(WAITING) * len(
        POLICIES
    ) * len(ARMS) * NUM_STEPS
    return stdout.getvalue(), record


def _cell(record: dict[str, object], policy: str, num_waiting: int) -> dict[str, object]:
    cells = record["cells"]
    assert isinstance(cells, list)
    [cell] = [c for c in cells if c["policy"] == policy and c["num_waiting"] == num_waiting]
    return dict(cell)


def test_table_has_every_cell_and_arm(bench_run: tuple[str, dict[str, object]]) -> None:
    text, _ = bench_run
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    cells = {tuple(cell.strip() for cell in row.strip("|").split("|")[:3]) for row in rows[1:]}
    expected = {(p, str(w), a) for p in POLICIES for w in WAITING for a in ARMS}
    assert cells == expected
    assert text.startswith("CPU: ") and "\ncommand: " in text
    aims = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(aims) == len(POLICIES) * (len(ARMS) - 1)
    assert all(line.count(": met") + line.count(": missed") == 2 for line in aims)


def test_record_is_well_formed(bench_run: tuple[str, dict[str, object]]) -> None:
    _, record = bench_run
    assert set(record) >= {"host", "command", "settings", "cells", "aims"}
    for policy in POLICIES:
        for num_waiting in WAITING:
            arms = _cell(record, policy, num_waiting)["arms"]
            assert isinstance(arms, dict) and list(arms) == list(ARMS)
            for arm, summary in arms.items():
                assert 0 < summary["median_us"] <= summary["p99_us"]
                assert len(summary["block_medians_us"]) == NUM_STEPS // 2
                assert summary["num_waiting_end"] == num_waiting
                assert summary["num_decoding_end"] == 32
                if arm != BASELINE:
                    added = summary["added"]
                    assert added["num_pairs"] == NUM_STEPS // 2
                    assert added["low_us"] <= added["median_us"] <= added["high_us"]


@pytest.mark.parametrize("policy", POLICIES)
def test_dlfp_arms_capped_the_prefill(
    bench_run: tuple[str, dict[str, object]], policy: str
) -> None:
    _, record = bench_run
    for num_waiting in WAITING[1:]:
        arms = _cell(record, policy, num_waiting)["arms"]
        assert isinstance(arms, dict)
        plain = arms[BASELINE]["mean_prefill_tokens"]
        assert plain > 1000  # vLLM fills the step budget with the waiting prompts
        assert arms["off"]["mean_prefill_tokens"] == plain
        for arm in ("dlfp", "dlfp-ct"):
            assert arms[arm]["mean_prefill_tokens"] < plain
            assert arms[arm]["num_capped_steps"] == NUM_STEPS
        assert arms["dlfp-ct"]["num_planned_steps"] == NUM_STEPS  # from the fitted cost model
    idle = _cell(record, policy, 0)["arms"]
    assert isinstance(idle, dict)
    assert all(idle[arm]["mean_prefill_tokens"] == 0 for arm in ARMS)
