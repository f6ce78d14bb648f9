"""What ``dlfp-ct``'s steps carried in each episode, and the longest arrival TTFT of each arm,
in episodes folders (this one by default). Per condition and episode: the median prefill
tokens of its steps with decodes and candidates (the steps the deadline plan sized), how
many of them were floor steps and by which rule (``floor_reason``, where the step logs
have it), and how many of its deadline steps ended past their deadline. Run from the
repository root: .venv/bin/python bench/results/episodes-room-zen4/analyse.py [FOLDER ...]

Where an arm's step logs are kept, also the step in flight when each short arrival was
sent: how long it ran, how much of it was left, and how often the arrival came within
its first ``EARLY_SHARE`` (the phase an arrival meets at a fixed offset); then what its
first token took after that step (``after it``) and how many steps ended from its sending
to its first token, the step in flight included (``steps``)."""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent
EARLY_SHARE = 0.15
"""An arrival sent within this share of the step in flight waits for nearly all of it."""


def _load(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()))


def steps_table(folder: Path) -> None:
    print(f"## {folder.name}: dlfp-ct's planned steps")
    print(
        "| condition | episode | steps | median prefill tokens | floor steps | floor rules "
        "| late deadline steps |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for path in sorted(folder.glob("*/steps/episode-*/dlfp-ct.json.gz")):
        steps = _load(path)["steps"]
        planned = [
            s
            for s in steps
            if s["num_decode_tokens"] and s["is_planned"] and s["deadline_slack_ms"] is not None
        ]
        tokens = [s["num_prefill_tokens"] for s in planned]
        floor = sum(1 for s in planned if s["is_floor"])
        rules = Counter(s.get("floor_reason") or "-" for s in planned if s["is_floor"])
        late = sum(
            1 for s in steps if s["deadline_slack_ms"] is not None and s["deadline_slack_ms"] < 0
        )
        deadline_steps = sum(1 for s in steps if s["deadline_slack_ms"] is not None)
        median = statistics.median(tokens) if tokens else "-"
        condition, episode = path.parts[-4], path.parts[-2].removeprefix("episode-")
        named = ", ".join(f"{rule} {n}" for rule, n in sorted(rules.items())) or "-"
        print(
            f"| {condition} | {episode} | {len(planned)} | {median} | {floor} | {named} "
            f"| {late} of {deadline_steps} |"
        )


def longest_ttft_table(folder: Path) -> None:
    print(f"## {folder.name}: longest arrival TTFT, s (arrivals past their TTFT objective)")
    longest: dict[str, dict[str, float]] = {}
    late: Counter[tuple[str, str]] = Counter()
    for path in sorted(folder.glob("*/records/episode-*/*.json.gz")):
        record = _load(path)
        condition, arm = path.parts[-4], record["arm"]
        by_arm = longest.setdefault(condition, {})
        settings = (record.get("reset_response") or {}).get("settings_in_engine") or {}
        objective_s = float(settings.get("ttft_slo_ms", 30000.0)) / 1000.0
        for arrival in record["arrivals"]:
            if arrival.get("chunk_s"):
                ttft_s = arrival["chunk_s"][0] - arrival["send_s"]
                by_arm[arm] = max(by_arm.get(arm, 0.0), ttft_s)
                late[condition, arm] += ttft_s > objective_s
    for condition, by_arm in sorted(longest.items()):
        arms = ", ".join(
            f"{arm} {s:.1f} ({late[condition, arm]})" for arm, s in sorted(by_arm.items())
        )
        print(f"- {condition}: {arms}")


def _ms(values: list[float]) -> str:
    """The median of ``values`` in ms, with their range."""
    low, mid, high = (1000 * f(values) for f in (min, statistics.median, max))
    return f"{mid:.0f} ({low:.0f}-{high:.0f})"


def short_arrivals_table(folder: Path) -> None:
    print(f"## {folder.name}: short arrivals and the step in flight when each was sent, ms")
    print(
        "| condition | arm | short arrivals | TTFT | step in flight | left of it "
        f"| sent in its first {100 * EARLY_SHARE:.0f}% | after it | steps |"
    )
    print("| --- | --- | ---: | --- | --- | --- | ---: | --- | --- |")
    for steps_path in sorted(folder.glob("*/steps/episode-0/*.json.gz")):
        condition, arm = steps_path.parts[-4], steps_path.name.removesuffix(".json.gz")
        ttft, step, left, waited = [], [], [], []
        for path in sorted(folder.glob(f"{condition}/steps/episode-*/{arm}.json.gz")):
            record_path = folder / condition / "records" / path.parts[-2] / path.name
            if not record_path.exists():
                continue
            record = _load(record_path)
            t0 = record["started_unix_s"]
            ends = sorted(s["done_unix_s"] - t0 for s in _load(path)["steps"])
            for arrival in record["arrivals"]:
                sent = arrival["send_s"]
                if arrival["kind"] != "short" or not arrival.get("chunk_s"):
                    continue
                before = [e for e in ends if e <= sent]
                after = [e for e in ends if e > sent]
                if not before or not after:
                    continue
                first_s = arrival["chunk_s"][0]
                ttft.append(first_s - sent)
                step.append(after[0] - before[-1])
                left.append(after[0] - sent)
                waited.append(sum(1 for e in after if e <= first_s))
        if ttft:
            early = sum(1 for s, rest in zip(step, left, strict=True) if s - rest < EARLY_SHARE * s)
            rest = [t - x for t, x in zip(ttft, left, strict=True)]
            steps = f"{statistics.median(waited):g} ({min(waited)}-{max(waited)})"
            print(
                f"| {condition} | {arm} | {len(ttft)} | {_ms(ttft)} | {_ms(step)} "
                f"| {_ms(left)} | {early} | {_ms(rest)} | {steps} |"
            )


def main() -> None:
    for folder in [Path(a) for a in sys.argv[1:]] or [FOLDER]:
        steps_table(folder)
        print()
        longest_ttft_table(folder)
        print()
        short_arrivals_table(folder)
        print()


if __name__ == "__main__":
    main()
