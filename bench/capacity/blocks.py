"""``bench sweep --block N``: each rate in short blocks, every arm on each block, paired.

A block is N requests per arm on one seeded Poisson schedule: the same arrivals and
prompts for every arm of the block. Blocks are seeds of the ordinary machinery, so
``run_all`` alternates the arms within a block in an order rotated by one per block, and a
trial is still ``rate-<r>/<arm>/seed-<block seed>.jsonl.gz``. The first 20% of each block
(``ceil(0.2 N)`` requests) are warm-up, left out of every figure, and the sweep waits for
the server to drain before every trial, so no block inherits the queue of the one before.
``blocks.json`` beside the results records the block size, the warm-up and the seeds, for
a re-analysis and for a resumed run (which must use the same block size).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.lib.loadgen import RunConfig

MIN_BLOCK = 30
"""The smallest block: its 80% measured requests must still say something of the tail."""
WARMUP_FRACTION = 0.2
FIRST_BLOCK_SEED = 9001
"""Without ``--seeds``, the blocks are seeds 9001, 9002, ... (none is a paper seed)."""
BLOCKS_FILE = "blocks.json"


@dataclass(frozen=True)
class Blocks:
    size: int
    """Requests per arm in one block, warm-up included."""
    num_warmup: int
    """The first requests of each block, discarded as warm-up."""
    seeds: tuple[int, ...]
    """One seed per block: its schedule and prompts."""

    @property
    def num_measured(self) -> int:
        return self.size - self.num_warmup


def warmup_of(size: int) -> int:
    return math.ceil(WARMUP_FRACTION * size)


def plan_blocks(
    size: int, seeds: tuple[int, ...] | None, num_requests: int | None, default_num_requests: int
) -> Blocks:
    """The blocks of one rate: one per seed of ``seeds`` when given, else
    ``ceil(num_requests / size)`` of them (``num_requests``: requests per arm and rate,
    warm-ups included, else ``default_num_requests``), seeded 9001, 9002, ..."""
    if size < MIN_BLOCK:
        raise ValueError(f"--block: at least {MIN_BLOCK} requests per arm, got {size}")
    if seeds is None:
        num_blocks = math.ceil((num_requests or default_num_requests) / size)
        seeds = tuple(range(FIRST_BLOCK_SEED, FIRST_BLOCK_SEED + num_blocks))
    elif num_requests is not None and math.ceil(num_requests / size) != len(seeds):
        raise ValueError(
            f"--seeds gives {len(seeds)} blocks, but --num-requests {num_requests} in blocks "
            f"of {size} needs {math.ceil(num_requests / size)}: give one of them"
        )
    return Blocks(size, warmup_of(size), seeds)


def block_run(run: RunConfig, blocks: Blocks) -> RunConfig:
    """``run`` with one trial per block and arm, draining the server before each."""
    workload = replace(run.workload, num_requests=blocks.num_measured, num_warmup=blocks.num_warmup)
    return replace(run, seeds=blocks.seeds, workload=workload, drain_between_trials=True)


def load_blocks(results_dir: Path) -> Blocks | None:
    path = results_dir / BLOCKS_FILE
    if not path.exists():
        return None
    saved: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return Blocks(int(saved["size"]), int(saved["num_warmup"]), tuple(saved["seeds"]))


def save_blocks(results_dir: Path, blocks: Blocks) -> Blocks:
    """Record ``blocks`` (with the seeds recorded before, if any); returns what was saved."""
    recorded = load_blocks(results_dir)
    seeds = sorted(set(blocks.seeds) | set(recorded.seeds if recorded else ()))
    saved = replace(blocks, seeds=tuple(seeds))
    results_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asdict(saved), indent=2) + "\n"
    (results_dir / BLOCKS_FILE).write_text(text, encoding="utf-8")
    return saved


def check_resumable(results_dir: Path, blocks: Blocks | None) -> None:
    """Refuse to add trials of another block size (or none) to a folder's recorded ones."""
    recorded = load_blocks(results_dir)
    if recorded is None:
        if blocks is not None and any(results_dir.glob("rate-*/*/seed-*.jsonl*")):
            raise ValueError(f"{results_dir} holds trials not run in blocks; use a new folder")
        return
    if blocks is None:
        raise ValueError(
            f"{results_dir} was run in blocks of {recorded.size} ({BLOCKS_FILE}): "
            f"resume it with --block {recorded.size}"
        )
    if (blocks.size, blocks.num_warmup) != (recorded.size, recorded.num_warmup):
        raise ValueError(
            f"{results_dir} was run in blocks of {recorded.size} ({recorded.num_warmup} warm-up), "
            f"not {blocks.size}: resume it with --block {recorded.size}, or use a new folder"
        )


def blocks_line(summary: dict[str, Any]) -> list[str]:
    """The one line the sweep's text and Markdown output give in block mode (else none)."""
    blocks = summary.get("blocks")
    if blocks is None:
        return []
    return [
        f"blocks of {blocks['block_size']} requests per arm, arms alternating; "
        f"the first {blocks['num_warmup_per_block']} of each block discarded as warm-up"
    ]


def summary_entry(blocks: Blocks) -> dict[str, Any]:
    """What ``summary.json`` records of the blocks (each rate adds its ``num_blocks``)."""
    return {"block_size": blocks.size, "num_warmup_per_block": blocks.num_warmup}
