"""What ``dlfp-ct``'s steps carried in each episode, and the longest arrival TTFT of each arm,
in episodes folders (this one by default). Per condition and episode: the median prefill
tokens of its steps with decodes and candidates (the steps the deadline plan sized), and
how many of them were floor steps. Run from the repository root:
.venv/bin/python bench/results/episodes-delivery-zen4/analyse.py [FOLDER ...]"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent


def _load(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()))


def steps_table(folder: Path) -> None:
    print(f"## {folder.name}: dlfp-ct's planned steps")
    print("| condition | episode | steps | median prefill tokens | floor steps |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for path in sorted(folder.glob("*/steps/episode-*/dlfp-ct.json.gz")):
        steps = _load(path)["steps"]
        planned = [
            s
            for s in steps
            if s["num_decode_tokens"] and s["is_planned"] and s["deadline_slack_ms"] is not None
        ]
        tokens = [s["num_prefill_tokens"] for s in planned]
        floor = sum(1 for s in planned if s["is_floor"])
        median = statistics.median(tokens) if tokens else "-"
        condition, episode = path.parts[-4], path.parts[-2].removeprefix("episode-")
        print(f"| {condition} | {episode} | {len(planned)} | {median} | {floor} |")


def longest_ttft_table(folder: Path) -> None:
    print(f"## {folder.name}: longest arrival TTFT, s")
    longest: dict[str, dict[str, float]] = {}
    for path in sorted(folder.glob("*/records/episode-*/*.json.gz")):
        record = _load(path)
        by_arm = longest.setdefault(path.parts[-4], {})
        for arrival in record["arrivals"]:
            if arrival.get("chunk_s"):
                ttft_s = arrival["chunk_s"][0] - arrival["send_s"]
                by_arm[record["arm"]] = max(by_arm.get(record["arm"], 0.0), ttft_s)
    for condition, by_arm in sorted(longest.items()):
        arms = ", ".join(f"{arm} {s:.1f}" for arm, s in sorted(by_arm.items()))
        print(f"- {condition}: {arms}")


def main() -> None:
    for folder in [Path(a) for a in sys.argv[1:]] or [FOLDER]:
        steps_table(folder)
        print()
        longest_ttft_table(folder)
        print()


if __name__ == "__main__":
    main()
