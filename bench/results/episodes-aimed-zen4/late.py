"""Which of `dlfp-ct`'s deadline steps ended late, in each condition of an episodes folder,
from its step logs (`<condition>/steps/episode-*/dlfp-ct.json.gz`): the deadline steps
(those with a stream deadline), the late ones (`deadline_slack_ms` below 0), split into
those that were not floor steps (the range of their observed over predicted time, and how
many were outliers, over 1.5 times) and floor steps by `floor_reason`; and the floor steps for TTFT
deadlines (`ttft_at_risk`) that carried fewer than 8 tokens. The step logs of
episodes-aimed-zen4 and episodes-resized-zen4 were dropped; restore them first (the
former's run.sh and the latter's DROPPED.md say how). Run from the repository root:
.venv/bin/python bench/results/episodes-aimed-zen4/late.py bench/results/episodes-aimed-zen4"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

from engine_worker.controller.slack_model import OUTLIER_RATIO

FLOOR_TOKENS = 8
"""``min_cap_tokens`` on the CPU."""


def main() -> None:
    folder = Path(sys.argv[1])
    print(f"## {folder.name}: `dlfp-ct`'s late deadline steps")
    print(
        "| condition | deadline steps | late | late, not floor | their observed / predicted "
        "| of them outliers | floor late (reason) | `ttft_at_risk` floors | under 8 tokens |"
    )
    print("| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: |")
    for condition in sorted(p for p in folder.iterdir() if (p / "steps").is_dir()):
        num_deadline = 0
        planned: list[float] = []
        floor_late: Counter[str] = Counter()
        num_ttft_floors = num_under = 0
        for path in sorted(condition.glob("steps/episode-*/dlfp-ct.json.gz")):
            with gzip.open(path, "rt") as handle:
                steps = json.load(handle)["steps"]
            for step in steps:
                if step["floor_reason"] == "ttft_at_risk":
                    num_ttft_floors += 1
                    num_under += step["num_prefill_tokens"] < FLOOR_TOKENS
                if step["deadline_slack_ms"] is None:
                    continue
                num_deadline += 1
                if step["deadline_slack_ms"] >= 0:
                    continue
                if step["is_floor"]:
                    floor_late[step["floor_reason"]] += 1
                else:
                    planned.append(step["observation_ms"] / step["predicted_busy_ms"])
        num_late = len(planned) + sum(floor_late.values())
        share = num_late / num_deadline if num_deadline else 0.0
        ratios = f"{min(planned):.2f} to {max(planned):.2f}" if planned else "-"
        outliers = sum(ratio > OUTLIER_RATIO for ratio in planned)
        reasons = ", ".join(f"{n} {reason}" for reason, n in floor_late.most_common()) or "0"
        print(
            f"| {condition.name} | {num_deadline} | {num_late} ({share:.2%}) | {len(planned)} "
            f"| {ratios} | {outliers} | {reasons} | {num_ttft_floors} | {num_under} |"
        )


if __name__ == "__main__":
    main()
