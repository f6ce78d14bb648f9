"""Where each short prompt's TTFT went in this folder's episodes: the step in flight when it
was sent (its length and what was left of it), then the steps until its first token.
Run from the repository root: .venv/bin/python bench/results/steps-slo500-zen4/analyse.py"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def main() -> None:
    steps = json.loads(gzip.decompress((FOLDER / "steps.json.gz").read_bytes()))["steps"]
    done = [(s["done_unix_s"], s) for s in steps if s["done_unix_s"]]
    print("| arm | episode | TTFT ms | in-flight step ms (prefill tokens) | left of it ms |")
    print("| --- | ---: | ---: | --- | ---: |")
    for path in sorted(FOLDER.glob("slo500-d8/records/episode-*/*.json.gz")):
        record = json.loads(gzip.decompress(path.read_bytes()))
        start = record["started_unix_s"]
        for arrival in record["arrivals"]:
            if arrival["kind"] != "short":
                continue
            sent = start + arrival["send_s"]
            first = start + arrival["chunk_s"][0]
            in_flight = next(s for end, s in done if end > sent)
            print(
                f"| {record['arm']} | {record['episode']} | {1000 * (first - sent):.0f} "
                f"| {in_flight['completion_interval_ms']:.0f} ({in_flight['num_prefill_tokens']}) "
                f"| {1000 * (in_flight['done_unix_s'] - sent):.0f} |"
            )


if __name__ == "__main__":
    main()
