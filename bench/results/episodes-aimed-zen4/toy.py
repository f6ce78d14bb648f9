"""The aim below the objective on the SIMULATED toy plant of the AMD EPYC family 25 model
17 at 90 ms with 8 streams (``FAST_DECODE`` in tests/test_slack_plan.py, the plant
``test_a_floor_for_ttft_deadlines_carries_only_the_tokens_they_need`` runs): two
1,600-token prompts 20 steps apart, a 30 s TTFT objective, seeds 0 to 3, four arms:
``fixed-8``; ``dlfp-ct`` as before (its tails at the objective's quantile, the margin's
correction aimed at all of the late share it allows, every floor step for TTFT deadlines at
``min_cap_tokens``); aimed at half the share with floor steps at ``min_cap_tokens``; and
as it stands (aimed at half, those floor steps at the tokens the deadlines need). Prints
each run's steps until the second prompt's first token, those that ended past the
objective, the floor steps and how many carried fewer than 8 tokens, and both TTFTs (s).
A simulation, not a measurement. Run from the repository root:
PYTHONPATH=. .venv/bin/python bench/results/episodes-aimed-zen4/toy.py"""

from __future__ import annotations

from unittest import mock

from engine_worker.controller import margin
from engine_worker.controller.deadline_plan import DeadlinePlan
from tests.test_slack_plan import FAST_DECODE, Run, serve

PROMPTS = {"first": (0, 1600), "second": (20, 1600)}
ITL_SLO_S = 0.09
ARMS = (
    ("fixed-8", 8, 0.5, False),
    ("dlfp-ct before", None, 1.0, True),
    ("aimed at half, floor at 8", None, 0.5, True),
    ("aimed at half, floor at need", None, 0.5, False),
)
"""(name, fixed cap, the aim's share of the allowed late steps, whether every floor step
for TTFT deadlines carries ``min_cap_tokens``)."""


def at_floor(self: DeadlinePlan, candidates: object, budget: int, floor: int, *rest: object) -> int:
    return floor


def main() -> None:
    print(
        "## A SIMULATION: the toy plant of the AMD EPYC family 25 model 17 at 90 ms with 8 "
        "streams, two 1,600-token prompts, seeds 0 to 3 (not a measurement)"
    )
    print(
        "(The arm `dlfp-ct before` differs from the plan before in one respect: the rate read "
        "after its floor steps for TTFT deadlines counts their attention.)"
    )
    print(
        "| arm | seed | steps | late | floor steps | under 8 tokens | first TTFT s "
        "| second TTFT s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, cap, aim, whole_floor in ARMS:
        totals = [0, 0, 0, 0]
        for seed in range(4):
            with (
                mock.patch.object(margin, "OVERRUN_AIM", aim),
                mock.patch.object(
                    DeadlinePlan,
                    "_needed_tokens",
                    at_floor if whole_floor else DeadlinePlan._needed_tokens,
                ),
            ):
                run: Run = serve(
                    FAST_DECODE,
                    PROMPTS,
                    num_steps=1200,
                    seed=seed,
                    fixed_cap=cap,
                    ttft_slo_s=30.0,
                    itl_slo_s=ITL_SLO_S,
                )
            num_steps = max(run.first_token_step.values())
            late = sum(run.late[:num_steps])
            floors = sum(run.floor[:num_steps])
            under = sum(
                floor and 0 < prefill < 8
                for floor, prefill in zip(run.floor[:num_steps], run.prefill, strict=False)
            )
            for i, value in enumerate((num_steps, late, floors, under)):
                totals[i] += value
            print(
                f"| {name} | {seed} | {num_steps} | {late} | {floors} | {under} "
                f"| {run.ttft_s['first']:.1f} | {run.ttft_s.get('second', float('nan')):.1f} |"
            )
        print(f"| {name} | all | {totals[0]} | {totals[1]} | {totals[2]} | {totals[3]} | | |")


if __name__ == "__main__":
    main()
