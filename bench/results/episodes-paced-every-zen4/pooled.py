"""`dlfp-ct`'s TTFT against `fixed-128` at 500 ms with 2 streams, pooled over every run of
that condition on this machine since each step stops at the knee of its rate (the
scheduler at 500 ms has not changed since: the floor and its pace act where the slack is
thin). Each run's episodes with one index send the same arrivals, so the pooled interval
is given twice: over every paired episode as if independent, and over the episode
indices, each the mean log ratio of its runs (the runs sharing an index are one cluster).
Run from the repository root: .venv/bin/python bench/results/episodes-paced-every-zen4/pooled.py
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from bench.episodes.run import read_records
from bench.episodes.stats import episode_figures
from bench.lib.compare import paired_ci

RUNS = (
    "episodes-knee-zen4",
    "episodes-knee-again-zen4",
    "episodes-pending-zen4",
    "episodes-paced-every-zen4",
    "episodes-rate-loss-zen4",
)
CONDITION = "slo500-d2"
ITL_SLO_MS = 500.0
ARM, REFERENCE = "dlfp-ct", "fixed-128"
KEYS = {"all arrivals": "ttft_mean_ms", "short prompts": "ttft_short_mean_ms"}


def _interval(logs: list[float]) -> str:
    ci = paired_ci(logs)
    if ci is None or ci.low is None or ci.high is None:
        return "-"
    return f"{math.exp(ci.mean):.2f} [{math.exp(ci.low):.2f}, {math.exp(ci.high):.2f}]"


def main() -> None:
    results = Path("bench/results")
    by_key: dict[str, dict[int, list[float]]] = {k: defaultdict(list) for k in KEYS}
    print(f"## `{ARM}` against `{REFERENCE}`, {CONDITION}: per run and pooled")
    print("| run | paired episodes | all arrivals | short prompts |")
    print("| --- | ---: | --- | --- |")
    for run in RUNS:
        records = read_records(results / run / CONDITION)
        a, b = records[ARM], records[REFERENCE]
        row: dict[str, list[float]] = {k: [] for k in KEYS}
        for episode in sorted(set(a) & set(b)):
            fa = episode_figures(a[episode], ITL_SLO_MS)
            fb = episode_figures(b[episode], ITL_SLO_MS)
            if not (fa["usable"] and fb["usable"]):
                continue
            for name, key in KEYS.items():
                if fa[key] and fb[key]:
                    log = math.log(fa[key] / fb[key])
                    row[name].append(log)
                    by_key[name][episode].append(log)
        num = len(row["all arrivals"])
        print(f"| `{run}` | {num} | " + " | ".join(_interval(row[k]) for k in KEYS) + " |")
    pooled = {k: [v for logs in by_key[k].values() for v in logs] for k in KEYS}
    clustered = {k: [statistics.fmean(logs) for logs in by_key[k].values()] for k in KEYS}
    print(
        f"| pooled, episodes as independent | {len(pooled['all arrivals'])} | "
        + " | ".join(_interval(pooled[k]) for k in KEYS)
        + " |"
    )
    print(
        f"| pooled, by episode index | {len(clustered['all arrivals'])} | "
        + " | ".join(_interval(clustered[k]) for k in KEYS)
        + " |"
    )


if __name__ == "__main__":
    main()
