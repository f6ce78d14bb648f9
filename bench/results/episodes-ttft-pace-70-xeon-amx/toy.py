"""The floor for TTFT deadlines on the SIMULATED toy plant of the Intel Xeon family 6 model
167 at 90 ms with 8 streams (``XEON_THIN`` in tests/test_slack_plan.py, the plant
``test_where_the_floor_would_hold_a_prompt_past_its_deadline_it_paces_beyond_it`` runs):
two 3,600-token prompts 25 steps apart, a 30 s TTFT objective, seeds 0 to 3, under
``fixed-8``, ``fixed-16``, ``dlfp-ct``, ``dlfp-ct`` with the floor held at
``min_cap_tokens`` (``_may_pace`` false: the rule before), and ``dlfp-ct`` with the rate
the deadlines need read only after a budget under the floor (not where a prompt is at
risk). Prints each run's TTFTs (s), its paced steps, and its steps' times until the second
prompt's first token (ms: median, P99; the plant's outliers left out). A simulation, not a
measurement. Run from the repository root:
PYTHONPATH=. .venv/bin/python bench/results/episodes-ttft-pace-70-xeon-amx/toy.py"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

import tests.test_slack_plan as toy
from engine_worker.controller.deadline_plan import DeadlinePlan

PROMPTS = {"first": (5, 3600), "second": (30, 3600)}
ITL_SLO_S = 0.09
READING = toy._ttft_reading


def _read_after_a_floor_only(*args: object) -> tuple[set[str], float | None, float | None]:
    at_risk, needed, paced = READING(*args)  # type: ignore[arg-type]
    controller = args[0]
    asks = controller.reads_ttft_rate()  # type: ignore[attr-defined]
    return (at_risk, needed, paced) if asks else (at_risk, None, None)


@contextlib.contextmanager
def _arm(name: str) -> Iterator[None]:
    if name == "dlfp-ct, floor at 8":
        with mock.patch.object(DeadlinePlan, "_may_pace", lambda self, *args: False):
            yield
    elif name == "dlfp-ct, read after a floor":
        with mock.patch.object(toy, "_ttft_reading", _read_after_a_floor_only):
            yield
    else:
        yield


def main() -> None:
    print("| seed | arm | first TTFT s | second TTFT s | paced steps | median ms | P99 ms |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    arms = (
        ("fixed-8", 8),
        ("fixed-16", 16),
        ("dlfp-ct", None),
        ("dlfp-ct, floor at 8", None),
        ("dlfp-ct, read after a floor", None),
    )
    for seed in range(4):
        for name, cap in arms:
            with _arm(name):
                run = toy.serve(
                    replace(toy.XEON_THIN),
                    PROMPTS,
                    num_steps=1500,
                    seed=seed,
                    fixed_cap=cap,
                    ttft_slo_s=30.0,
                    itl_slo_s=ITL_SLO_S,
                )
            steps = sorted(s * 1000.0 for s in run.settled_step_s())
            assert run.controller is not None
            paced = run.controller._deadline_plan.num_paced_steps if cap is None else 0
            ttft = {k: f"{run.ttft_s[k]:.1f}" if k in run.ttft_s else "-" for k in PROMPTS}
            print(
                f"| {seed} | {name} | {ttft['first']} | {ttft['second']} | {paced} "
                f"| {steps[len(steps) // 2]:.0f} | {steps[int(0.99 * len(steps))]:.0f} |"
            )


if __name__ == "__main__":
    main()
