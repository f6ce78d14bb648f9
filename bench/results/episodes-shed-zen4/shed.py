"""What admission refused in each arm of bench/results/episodes-shed-zen4, by the kind
of request (the long prompts by their order in the episode), and the time to first token
of what it served (mean, median, longest, and how many within the 30 s objective).
Needs the records (DROPPED.md); give their folder as the argument."""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

FOLDER = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/episodes-shed-zen4")
REASON = re.compile(r'"code":"([a-z_]+)"')
TTFT_SLO_S = 30.0
"""The arrivals' TTFT objective (``ttft_slo_ms`` in the run's settings)."""


def main() -> None:
    print(f"## {FOLDER.name}: refusals and served TTFTs, s")
    print(
        "| condition | arm | kind | sent | refused (reason) | TTFT mean | median | longest "
        "| within 30 s |"
    )
    print("| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for condition in sorted(p for p in FOLDER.iterdir() if (p / "records").is_dir()):
        sent: dict[tuple[str, str], int] = defaultdict(int)
        refused: dict[tuple[str, str], list[str]] = defaultdict(list)
        ttfts: dict[tuple[str, str], list[float]] = defaultdict(list)
        for path in sorted((condition / "records").glob("episode-*/*.json.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                record = json.load(f)
            kinds = [r["kind"] for r in record["arrivals"]]
            for request in record["decoders"] + record["arrivals"]:
                kind = request["kind"]
                if kind != "decoder" and kinds.count(kind) > 1:  # long 1, long 2, ...
                    kind += f" {kinds[: record['arrivals'].index(request) + 1].count(kind)}"
                key = (record["arm"], kind)
                sent[key] += 1
                if request["http_status"] != 200:
                    match = REASON.search(request["error"] or "")
                    refused[key].append(match.group(1) if match else str(request["http_status"]))
                elif request["chunk_s"]:
                    ttfts[key].append(request["chunk_s"][0] - request["send_s"])
        for key in sorted(sent):
            times = ttfts[key]
            reasons = ", ".join(f"{r} {refused[key].count(r)}" for r in sorted(set(refused[key])))
            figures = (
                f"{statistics.mean(times):.2f} | {statistics.median(times):.2f} | "
                f"{max(times):.2f} | {sum(t <= TTFT_SLO_S for t in times)}"
                if times
                else "- | - | - | -"
            )
            print(
                f"| {condition.name} | {key[0]} | {key[1]} | {sent[key]} | "
                f"{len(refused[key])}{f' ({reasons})' if reasons else ''} | {figures} |"
            )


if __name__ == "__main__":
    main()
