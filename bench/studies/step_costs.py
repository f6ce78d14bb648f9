"""What does a prefill token cost beside the decodes, in saved step telemetry?

    python -m bench.studies.step_costs bench/results/protocol-n30-avx512/logs/steps-last.json.gz

For each prefill chunk size seen in at least ``--min-steps`` mixed steps:
the median busy time, and ``(median busy - median decode-only busy) / tokens``,
the marginal cost of a prefill token beside the decodes. A step's chunk size
and context both vary with the arm and the prompt, so this is a summary of
what ran, not a cost curve (``bench/results/*/plots/cost-model-*.png`` shows
the fitted model against every step).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.lib.records import open_text


def load_steps(path: Path) -> list[dict[str, Any]]:
    with open_text(path) as f:
        body = json.load(f)
    steps: list[dict[str, Any]] = body["steps"] if isinstance(body, dict) else body
    return [s for s in steps if s.get("busy_ms") is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "steps", type=Path, help="a saved GET /admin/dlfp/steps response (.json or .json.gz)"
    )
    parser.add_argument("--min-steps", type=int, default=20)
    args = parser.parse_args()
    steps = load_steps(args.steps)
    decode_only = [
        s["busy_ms"] for s in steps if s["num_decode_tokens"] and not s["num_prefill_tokens"]
    ]
    base = statistics.median(decode_only)
    print(f"decode-only steps: {len(decode_only)}, median busy {base:.1f} ms")
    print("prefill tokens | steps | median busy ms | marginal ms/token")
    by_size: dict[int, list[float]] = {}
    for s in steps:
        if s.get("is_mixed"):
            by_size.setdefault(s["num_prefill_tokens"], []).append(s["busy_ms"])
    for size, busy in sorted(by_size.items()):
        if len(busy) >= args.min_steps:
            median = statistics.median(busy)
            print(f"{size:14d} | {len(busy):5d} | {median:14.0f} | {(median - base) / size:17.2f}")


if __name__ == "__main__":
    main()
