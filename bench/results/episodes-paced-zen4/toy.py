"""The paced floor on the SIMULATED toy plant of the AMD EPYC family 25 model 17 at 60 ms
with 8 streams (``FAST_DECODE`` in tests/test_slack_plan.py, the plant
``test_where_the_objective_is_lost_the_floor_paces_to_the_ttft_deadlines`` runs): two
1,800-token prompts 20 steps apart, a 30 s TTFT objective, under ``dlfp-ct`` and
``fixed-8``, seeds 0 to 3. Prints each run's TTFTs (s), its paced steps, and its steps'
times until the second prompt's first token (ms: median, P99, longest; share past twice
the objective; the plant's outliers left out). A simulation, not a measurement. Run from
the repository root: PYTHONPATH=. .venv/bin/python bench/results/episodes-paced-zen4/toy.py"""

from __future__ import annotations

from tests.test_slack_plan import FAST_DECODE, Run, serve

PROMPTS = {"first": (5, 1800), "second": (25, 1800)}
ITL_SLO_S = 0.06


def main() -> None:
    print(
        "| seed | arm | first TTFT s | second TTFT s | paced steps | median ms | P99 ms "
        "| longest ms | past 120 ms |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for seed in range(4):
        for arm, cap in (("dlfp-ct", None), ("fixed-8", 8)):
            run: Run = serve(
                FAST_DECODE,
                PROMPTS,
                num_steps=1000,
                seed=seed,
                fixed_cap=cap,
                ttft_slo_s=30.0,
                itl_slo_s=ITL_SLO_S,
            )
            times = sorted(s * 1000.0 for s in run.settled_step_s())
            assert run.controller is not None
            paced = run.controller._deadline_plan.num_paced_steps if cap is None else 0
            past = sum(t > 2000.0 * ITL_SLO_S for t in times) / len(times)
            print(
                f"| {seed} | {arm} | {run.ttft_s['first']:.1f} | {run.ttft_s['second']:.1f} "
                f"| {paced} | {times[len(times) // 2]:.0f} | {times[int(0.99 * len(times))]:.0f} "
                f"| {times[-1]:.0f} | {past:.1%} |"
            )


if __name__ == "__main__":
    main()
