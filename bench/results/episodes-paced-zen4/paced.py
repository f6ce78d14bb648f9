"""The floor steps of each `dlfp-ct` arm-episode in bench/results/episodes-paced-zen4, by
the rule that sent them (``floor_reason``), how many were paced above ``min_cap_tokens``
for the prompts' TTFT deadlines, and the step times (ms: count, median, 90th percentile,
longest) of the paced steps, of the 8-token floor steps and of the decode-only steps of all
8 streams. Needs the step logs (DROPPED.md); give their results folder as the argument."""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

FOLDER = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/episodes-paced-zen4")
MIN_CAP_TOKENS = 8
"""``min_cap_tokens`` on the CPU (the run's settings)."""


def spread(times: list[float]) -> str:
    if not times:
        return "-"
    times = sorted(times)
    return (
        f"{len(times)}: {times[len(times) // 2]:.0f} / {times[int(0.9 * len(times))]:.0f} "
        f"/ {times[-1]:.0f}"
    )


def main() -> None:
    print(f"## {FOLDER.name}: `dlfp-ct`'s floor steps and the paced ones")
    print(
        "| condition | episode | planned | floor steps by rule | paced (tokens) "
        "| paced ms | 8-token floor ms | decode-only ms |"
    )
    print("| --- | ---: | ---: | --- | --- | --- | --- | --- |")
    for condition in sorted(p for p in FOLDER.iterdir() if (p / "steps").is_dir()):
        episodes = sorted(
            (condition / "steps").glob("episode-*"), key=lambda p: int(p.name.split("-")[1])
        )
        for episode in episodes:
            with gzip.open(episode / "dlfp-ct.json.gz", "rt", encoding="utf-8") as f:
                steps = json.load(f)["steps"]
            floor = [s for s in steps if s.get("is_floor")]
            paced = [s for s in floor if (s.get("cap_tokens") or 0) > MIN_CAP_TOKENS]
            reasons = Counter(s["floor_reason"] for s in floor)
            sizes = Counter(s["cap_tokens"] for s in paced)
            decodes = max((s["num_decoding"] for s in steps), default=0)
            timed = [s for s in steps if s["observation_ms"]]
            floor_8 = [s for s in timed if s.get("is_floor") and s["cap_tokens"] == MIN_CAP_TOKENS]
            decode_only = [
                s for s in timed if s["num_prefill_tokens"] == 0 and s["num_decoding"] == decodes
            ]
            print(
                f"| {condition.name} | {episode.name.split('-')[1]} "
                f"| {sum(1 for s in steps if s.get('is_planned'))} "
                f"| {', '.join(f'{r} {n}' for r, n in sorted(reasons.items())) or '-'} "
                f"| {len(paced)} ({', '.join(f'{t}: {n}' for t, n in sorted(sizes.items()))}) "
                f"| {spread([s['observation_ms'] for s in paced if s['observation_ms']])} "
                f"| {spread([s['observation_ms'] for s in floor_8])} "
                f"| {spread([s['observation_ms'] for s in decode_only])} |"
            )


if __name__ == "__main__":
    main()
