"""The burst trials of this folder as one Markdown table.

python bench/results/abuse-xeon-amx/table.py
"""

import gzip
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODE = {
    "littles-law": "queue check on: slot rate by Little's law, prefill ahead during the wait",
    "turnover": "queue check on: 30 s window rate after a turnover, prefill ahead during the wait",
    "before-fix": "queue check on, prefill of the queue counted twice",
    "second-try": "queue check on, release-interval rate",
    "queue-check": "queue check on, 30 s window rate",
    ".": "queue check off",
}
print(
    "| trials | arm | burst | served within SLO | 429 (queue_full / slo) "
    "| admitted P99 TTFT | refusal P95 |"
)
print("| --- | --- | --- | --- | --- | --- | --- |")
for folder, what in CODE.items():
    for path in sorted(
        (HERE / folder).glob("burst-*.json.gz"), key=lambda p: p.name.replace("-warm", "~")
    ):
        f = json.loads(gzip.decompress(path.read_bytes()))["scenarios"][0]["figures"]
        stem = path.name.removesuffix(".json.gz")
        arm = stem.split("-", 2)[2]
        label = "before (9ab756b)" if arm.startswith("before") else f"after: {what}"
        burst = "second, 5 s later" if arm.endswith("-warm") else "first"
        codes = f["by_code"]
        print(
            f"| {folder}/{stem} | {label} | {burst} | {f['num_within_slo']} | "
            f"{f['by_status'].get('429', 0)} "
            f"({codes.get('queue_full', 0)} / {codes.get('slo', 0)}) | "
            f"{f['ttft_ms']['p99'] / 1000:.1f} s | {f['refusal_ms']['p95'] / 1000:.2f} s |"
        )
