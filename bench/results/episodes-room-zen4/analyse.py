"""What ``dlfp-ct``'s steps carried in each episode, and the longest arrival TTFT of each arm,
in episodes folders (this one by default). Per condition and episode: the median prefill
tokens of its steps with decodes and candidates (the steps the deadline plan sized), how
many of them were floor steps and by which rule (``floor_reason``, where the step logs
have it), and how many of its deadline steps ended past their deadline. Run from the
repository root: .venv/bin/python bench/results/episodes-room-zen4/analyse.py [FOLDER ...]"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent


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


def main() -> None:
    for folder in [Path(a) for a in sys.argv[1:]] or [FOLDER]:
        steps_table(folder)
        print()
        longest_ttft_table(folder)
        print()


if __name__ == "__main__":
    main()
