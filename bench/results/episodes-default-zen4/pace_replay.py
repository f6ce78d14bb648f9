"""Why the floor's pace acted in only 1 of 12 episodes at 60 ms with 8 streams: `dlfp-ct`'s
recorded steps replayed through ``SlackModel``, and at each floor step (``no_slack``,
``objective_lost``) the two sides of ``DeadlinePlan._paced_tokens`` rebuilt.

- ``most``: the tokens whose increment, times the step's recorded margin ``m``, fits the
  pace's bound (a step that starts right after the binding stream's token and ends within
  twice the 60 ms objective, at its tail): ``room + 0.95 * 60 ms``, ``room = 0.95 * (60
  ms - q_D * D)`` (not scaled where negative). The pace can add nothing where ``most`` is
  at most 8 (``min_cap_tokens``).
- ``needed``: the rate the long prompts' TTFT deadlines need to their guards (EDF's test
  over ``paced_deadline``), rebuilt from the episode records (each long prompt's arrival,
  first token, 30 s objective and tokens left, the head's from the step's context), those
  out of reach left out (``PrefillSelectionMixin._ttft_deadlines``); against it the rate
  the floor gives with the increment at the margin, ``8 / (D + m I(8))``. The pace acts
  only where that rate falls short of ``needed`` and ``most`` exceeds 8.

Simplified: the short prompts are left out of ``needed``; the budget is the head prompt's
alone; neither ``max_cap_tokens`` nor the trust bound limits ``most``; the host's share is
0 (right under ``observation: completion``, the run's). The model is this tree's
``SlackModel``; the run's kept a decode-only step learnt as a new speed in the decodes'
tail, and no such step came in this condition.

Two sets of fits. ``live, held``: the fits of each arm's start (its reset response's
``cost_coefficients``; the live model came from the conditions before, which the replay
does not have), held for the arm, while the tails learn from its steps (live, the fits
moved only on the few steps that were not floor steps, and with a covariance the replay
does not have). ``this condition's own``: the model fed from empty. Either way floor steps
are not fed to it, as live (``StepEvents.on_step_done``). The decodes' tail is not seeded:
it starts empty, so episode 0's is the starting tail, then only this condition's steps.
``pred/rec`` is the replayed prediction of each floor step over the recorded one (``D +
I``, not the tail ``q_D``), ``obs/pred`` the step's observed time over the replayed
prediction (medians by episode). A second table gives the median step time with 8 decodes
by prefill tokens at 90 and 60 ms, both arms, with the median decode context of each.

The step logs were dropped; restore them first:
git checkout 76cac860 -- bench/results/episodes-default-zen4
Run from the repository root:
.venv/bin/python bench/results/episodes-default-zen4/pace_replay.py \
    > bench/results/episodes-default-zen4/pace_replay.md
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

from engine_worker.controller import slack_model
from engine_worker.controller.cost_model import StepShape, chunk_attention
from engine_worker.controller.slack_model import SlackModel
from engine_worker.controller.step_timing import logged_prefill_start, logged_shape
from engine_worker.engine_core.prefill_order import needed_rate, paced_deadline

CONDITION = Path(__file__).parent / "slo60-d8-thin"
ITL_S = 0.060
TTFT_S = 30.0
FLOOR = 8
PLANNED = 0.95
"""1 - delivery_share."""
PACED_REASONS = ("no_slack", "objective_lost")
LONG_TOKENS = 1_610
"""About a long prompt's tokens (1,603 to 1,617 in this run)."""


def _load(kind: str, episode: int) -> Any:
    with gzip.open(CONDITION / kind / f"episode-{episode}" / "dlfp-ct.json.gz") as f:
        return json.load(f)


def _longs(record: dict[str, Any]) -> list[tuple[float, float, int]]:
    """Each served long prompt's arrival and first token (Unix s) and its prompt tokens."""
    start = record["started_unix_s"]
    return [
        # NOTE: chunk_s counts from the episode's start, as send_s does.
        (start + a["send_s"], start + a["chunk_s"][0], a["num_prompt_tokens"])
        for a in record["arrivals"]
        if a["kind"] == "long" and a["status"] == "ok"
    ]


def _needed(
    longs: list[tuple[float, float, int]],
    now_s: float,
    head_computed: int,
    rates: tuple[float, float],
) -> tuple[float, int]:
    """The paced rate the waiting long prompts need, those out of reach left out
    (``PrefillSelectionMixin._ttft_deadlines``: a lone prefill at the fits' rates would not
    finish it by its deadline), and how many are out of reach."""
    per_token_s, per_context_s = rates
    num_out = 0
    reachable: list[tuple[float, int]] = []
    head_taken = False
    for arrival_s, first_s, tokens in sorted(longs):
        if arrival_s > now_s or first_s <= now_s:
            continue
        computed = 0 if head_taken else min(head_computed, tokens - 1)
        remaining = tokens - computed
        head_taken = True
        deadline_s = arrival_s + TTFT_S
        paced = (paced_deadline(deadline_s, TTFT_S, now_s), remaining)
        alone_s = remaining * (per_token_s + per_context_s * (computed + remaining / 2))
        if deadline_s - now_s >= alone_s:
            reachable.append(paced)
        else:
            num_out += 1
    return needed_rate(reachable, now_s), num_out


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def _floor_step(
    model: SlackModel,
    step: dict[str, Any],
    decodes: StepShape,
    computed: int,
    longs: list[tuple[float, float, int]],
) -> dict[str, float]:
    """The pace's two sides at one floor step, as the replayed model sees them."""
    decode_s = model.decode_s(decodes)
    tail = model.decode_tail()
    margin = step["margin"]
    room_s = ITL_S - tail * decode_s
    room_s = room_s * PLANNED if room_s > 0 else room_s
    bound_s = room_s + PLANNED * ITL_S
    most = model.budget_tokens(bound_s, [(computed, LONG_TOKENS - computed)], margin)[0]
    floor_increment_s = model.increment_s(FLOOR, chunk_attention(computed, FLOOR))
    rates = model.prefill_rates() or (0.0, 0.0)
    per_token_s = rates[0]
    now_s = step["done_unix_s"] - step["observation_ms"] / 1000.0
    reachable, out_of_reach = _needed(longs, now_s, computed, rates)
    floor_rate = FLOOR / (decode_s + margin * floor_increment_s)
    return {
        "tail": tail,
        "D": decode_s * 1000.0,
        "i1": per_token_s * 1000.0,
        "I8": floor_increment_s * 1000.0,
        "m": margin,
        "bound": bound_s * 1000.0,
        "most": float(most),
        "within": float(most <= FLOOR),
        "rate": floor_rate,
        "needed": reachable,
        "short": float(floor_rate < reachable),
        "out": float(out_of_reach > 0),
        "paced": float(most > FLOOR and floor_rate < reachable),
    }


def _seed(model: SlackModel, coefficients: list[float]) -> None:
    """The live fits at the arm's start (its reset response, ``SlackModel.coefficients``'
    layout) put into the replayed model: the live model came from the conditions before,
    which the replay does not have. Private state, set on purpose (an analysis script)."""
    d0, _, d1, d2, i1, i2 = coefficients
    model._decode._estimate = [d0, d1, d2]
    model._decode.theta = [d0, d1, d2]
    model._increment._estimate = [i1, i2]
    model._increment.theta = [i1, i2]
    model._decode.num_samples = max(model._decode.num_samples, slack_model.MIN_DECODE_SAMPLES)
    model._increment.num_samples = max(
        model._increment.num_samples, slack_model.MIN_INCREMENT_SAMPLES
    )


def _replay(held: bool) -> dict[int, dict[str, list[float]]]:
    model = SlackModel(0.99)
    by_episode: dict[int, dict[str, list[float]]] = {}
    for episode in range(12):
        record = _load("records", episode)
        longs = _longs(record)
        coefficients = record["reset_response"]["cost_coefficients"]
        if held:
            _seed(model, coefficients)
        rows = by_episode.setdefault(episode, {})
        for step in _load("steps", episode)["steps"]:
            if not step["num_decoding"]:
                continue
            shape = logged_shape(step)
            computed = logged_prefill_start(step)
            decodes = StepShape(shape.num_decode_tokens, shape.decode_context_tokens)
            if step["is_floor"] and step["floor_reason"] in PACED_REASONS and model.is_ready:
                for key, value in _floor_step(model, step, decodes, computed, longs).items():
                    rows.setdefault(key, []).append(value)
                predicted_ms = (model.predict_s(shape) or 0.0) * 1000.0
                rows.setdefault("fidelity", []).append(predicted_ms / step["predicted_busy_ms"])
                rows.setdefault("observed", []).append(step["observation_ms"] / predicted_ms)
            if not step["is_floor"]:
                # NOTE: as live: a floor step is not observed (``StepEvents.on_step_done``).
                model.observe(shape, step["observation_ms"] / 1000.0)
                if held:
                    _seed(model, coefficients)  # the tails learn; the fits stay
    return by_episode


def _step_sizes() -> None:
    """Median step time of the steps with 8 decodes in both arms at 90 and 60 ms, by
    prefill tokens and the context they attend to: what a mixed step costs beside a
    decode-only one, which the increment's fit (no intercept) spreads over its tokens."""
    print()
    print(
        "## Steps with 8 decodes, both arms: median ms (steps; median decode context) "
        "by prefill tokens"
    )
    sizes = ((0, 0), (1, 3), (4, 7), (8, 8), (9, 12), (13, 16))
    header = " | ".join(f"{low}-{high}" if low != high else str(low) for low, high in sizes)
    print(f"| condition | context | {header} |")
    print("| --- | --- |" + " ---: |" * len(sizes))
    for condition in ("slo90-d8", "slo60-d8-thin"):
        folder = CONDITION.parent / condition / "steps"
        cells: dict[tuple[str, int], list[float]] = {}
        contexts: dict[tuple[str, int], list[float]] = {}
        for path in sorted(folder.glob("episode-*/*.json.gz")):
            with gzip.open(path) as f:
                steps = json.load(f)["steps"]
            for step in steps:
                if step["num_decoding"] != 8:
                    continue
                prefill = step["num_prefill_tokens"]
                context = "under 500" if step["prefill_context_tokens"] < 500 else "500 on"
                for index, (low, high) in enumerate(sizes):
                    if low <= prefill <= high:
                        cells.setdefault((context, index), []).append(step["busy_ms"])
                        contexts.setdefault((context, index), []).append(
                            step["decode_context_tokens"]
                        )
        for context in ("under 500", "500 on"):
            row = []
            for index in range(len(sizes)):
                values = cells.get((context, index), [])
                decode_context = statistics.median(contexts.get((context, index), [0]))
                row.append(
                    f"{statistics.median(values):.1f} ({len(values)}; {decode_context:.0f})"
                    if values
                    else "-"
                )
            print(f"| {condition} | {context} | " + " | ".join(row) + " |")


def main() -> None:
    print("## episodes-default-zen4, 60 ms with 8 streams: the pace's two sides replayed")
    print(
        "| fits | episode | floor steps | pred/rec | obs/pred | D ms | q_D | ms a token "
        "| m I(8) ms | m | bound ms | most, median (max) "
        "| most <= 8 | floor rate tok/s | needed tok/s | floor rate short of it "
        "| a long one out of reach | pace would act |"
    )
    print("| --- " + "| ---: " * 10 + "| --- " + "| ---: " * 6 + "|")
    for held, rule in ((True, "live, held"), (False, "this condition's own")):
        for episode, rows in _replay(held).items():
            most = rows.get("most")
            if not most:
                continue
            cells = (
                rule,
                episode,
                len(most),
                f"{statistics.median(rows['fidelity']):.2f}",
                f"{statistics.median(rows['observed']):.2f}",
                _median(rows["D"]),
                f"{statistics.median(rows['tail']):.2f}",
                f"{statistics.median(rows['i1']):.2f}",
                _median([m * i for m, i in zip(rows["m"], rows["I8"], strict=True)]),
                f"{statistics.median(rows['m']):.2f}",
                _median(rows["bound"]),
                f"{statistics.median(most):.0f} ({max(most):.0f})",
                f"{sum(rows['within']) / len(most):.0%}",
                _median(rows["rate"]),
                _median([v for v in rows["needed"] if v > 0]),
                f"{sum(rows['short']) / len(most):.0%}",
                f"{sum(rows['out']) / len(most):.0%}",
                f"{sum(rows['paced']) / len(most):.0%}",
            )
            print("| " + " | ".join(str(cell) for cell in cells) + " |")
    _step_sizes()


if __name__ == "__main__":
    main()
