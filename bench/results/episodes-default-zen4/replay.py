"""The decodes' tail in `dlfp-ct`'s recorded steps at 90 ms with 2 streams, episodes 6 to
11, replayed through ``SlackModel``: with the steps learnt as the machine's new speed kept
out of the tail (the scheduler since this run) and taken in (the rule this run ran). For
each planned step, ``q_D * D``, the time the plan keeps for the decodes' tail; at or above
83.5 ms (the objective less its delivery share) not one prefill token fits.

The replay feeds the steps as they ran (the plan's own decisions are not replayed), and
only `dlfp-ct`'s, from episode 6 on, so it reconstructs the tail, not the other arms'
effect on the fits. The step logs were dropped; restore them first:
git checkout 76cac860 -- bench/results/episodes-default-zen4
Run from the repository root:
.venv/bin/python bench/results/episodes-default-zen4/replay.py \
    > bench/results/episodes-default-zen4/replay.md
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine_worker.controller import slack_model
from engine_worker.controller.cost_model import StepShape
from engine_worker.controller.step_timing import logged_shape

STEPS = Path(__file__).parent / "slo90-d2" / "steps"
EPISODES = range(6, 12)
NO_TOKEN_MS = 83.5
"""The ITL objective (90 ms) less the delivery share and the host: the plans' target."""


def _steps() -> Iterator[tuple[int, dict[str, Any]]]:
    for episode in EPISODES:
        with gzip.open(STEPS / f"episode-{episode}" / "dlfp-ct.json.gz") as f:
            for step in json.load(f)["steps"]:
                if step["num_decoding"]:
                    yield episode, step


def _replay(keep_out: bool) -> dict[int, list[float]]:
    model = slack_model.SlackModel(0.99)
    reserved: dict[int, list[float]] = {}
    for episode, step in _steps():
        shape = logged_shape(step)
        decodes = StepShape(shape.num_decode_tokens, shape.decode_context_tokens)
        prefill = shape.num_prefill_tokens
        seconds = step["observation_ms"] / 1000.0
        if step["is_planned"]:
            tail_ms = model.decode_tail() * model.decode_s(decodes) * 1000.0
            reserved.setdefault(episode, []).append(tail_ms)
        decode_s = model.decode_s(shape)
        increment_s = model.increment_s(prefill, shape.attention_tokens2)
        predicted_s = decode_s + increment_s if model.is_ready else None
        # NOTE: private state read on purpose: the rule before took a learnt decode-only
        # step (the OUTLIER_RUN-th outlier in a row or after) into the decodes' tail.
        is_learnt = (
            not prefill
            and model.is_outlier(predicted_s, seconds)
            and model._outliers_in_a_row + 1 >= slack_model.OUTLIER_RUN
            and model._decode.num_samples >= slack_model.MIN_DECODE_SAMPLES
            and decode_s > 0
        )
        model.observe(shape, seconds)
        if is_learnt and not keep_out:
            model._decode_tail.add(seconds / decode_s)
    return reserved


def main() -> None:
    print("## episodes-default-zen4, 90 ms with 2 streams: the decodes' tail replayed")
    print(
        "| rule | episode | planned steps | q_D * D ms, median | max | steps with no token's room |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for keep_out, rule in ((False, "learnt steps taken in (as run)"), (True, "kept out")):
        for episode, values in _replay(keep_out).items():
            values.sort()
            full = sum(1 for v in values if v >= NO_TOKEN_MS)
            median = values[len(values) // 2]
            row = (rule, episode, len(values), f"{median:.1f}", f"{values[-1]:.1f}", full)
            print("| " + " | ".join(str(cell) for cell in row) + " |")


if __name__ == "__main__":
    main()
