"""One interference episode against a running gateway, and what it records.

An episode: ``D`` decoding streams start; once every one has its first token
and a lead has passed, the arrivals (long and short prompts) are sent at their
offsets, each moved later by a draw of the episode's seed (``offset_jitter_s``).
The decoding streams run until the last arrival's first token plus a
tail, then disconnect (the gateway aborts them). The *interference window* runs
from the first arrival's send to the last arrival's first token; the lead,
when only decoding runs, gives the episode's lone-decode step.

Everything an episode sends derives from its episode seed, except a per-arm
nonce that opens every prompt, so every arm replays the same episode (same
lengths, same offsets) without a prefix-cache hit from another arm's run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from bench.lib.client import ClientSettings, new_record, stream_into
from bench.lib.records import RequestRecord, open_text, write_json
from bench.lib.text import TextGenerator
from bench.lib.tokens import TokenCounter
from bench.lib.workload import RequestSpec, make_prompt

NONCE_CHARS = 12
"""Every prompt opens with ``[run <nonce>]``: the same length in every arm."""


@dataclass(frozen=True)
class EpisodeShape:
    """What every episode of a run sends: by default 4 decoding streams, 2 long and 2 short
    arrivals."""

    num_decoders: int = 4
    arrival_kinds: tuple[str, ...] = ("long", "short", "long", "short")
    offsets_s: tuple[float, ...] = (0.0, 0.5, 1.5, 2.0)
    """Send times of the arrivals, after the lead, in the order of ``arrival_kinds``."""
    offset_jitter_s: float = 0.5
    """Each offset moves later by a uniform draw below this, from the episode's seed (every
    arm alike): at fixed offsets an arrival meets the same point of an arm's step in every
    episode (its steps' lengths repeat), and its TTFT measures that phase, not the arm.
    At most the smallest gap between offsets, so the arrivals keep their order (0 where
    two offsets are equal)."""
    long_tokens: int = 3000
    """Length of every long prompt, by the harness's token counter (sized at the start)."""
    short_min_words: int = 10
    short_max_words: int = 40
    arrival_max_tokens: int = 8
    decoder_max_tokens: int = 2048
    """Enough to outlast the window: the decoders are cut when it ends."""
    lead_s: float = 1.0
    tail_s: float = 0.5

    def __post_init__(self) -> None:
        if self.num_decoders < 1:
            raise ValueError("an episode needs at least one decoding stream")
        if len(self.arrival_kinds) != len(self.offsets_s) or not self.offsets_s:
            raise ValueError("need one offset per arrival, and at least one arrival")
        if any(kind not in ("long", "short") for kind in self.arrival_kinds):
            raise ValueError(f"arrival kinds are long or short, got {self.arrival_kinds}")
        if min(self.offsets_s) < 0 or list(self.offsets_s) != sorted(self.offsets_s):
            raise ValueError(f"offsets must be >= 0 and ascending, got {self.offsets_s}")
        gaps = [b - a for a, b in zip(self.offsets_s, self.offsets_s[1:], strict=False)]
        smallest_gap = min(gaps, default=math.inf)
        if not (math.isfinite(self.offset_jitter_s) and 0 <= self.offset_jitter_s <= smallest_gap):
            raise ValueError(
                f"offset jitter must be finite, >= 0 and at most the smallest gap between offsets "
                f"({smallest_gap:g} s), got {self.offset_jitter_s:g}"
            )
        if not 1 <= self.short_min_words <= self.short_max_words:
            raise ValueError("need 1 <= short_min_words <= short_max_words")


@dataclass(frozen=True)
class Prompt:
    kind: str
    """``decoder``, ``long`` or ``short``."""
    text: str
    """Without the arm's nonce."""


def short_prompt(rng: random.Random, low: int, high: int) -> str:
    """A chat question of ``low..high`` words."""
    gen = TextGenerator(rng)
    words: list[str] = []
    while len(words) < high:
        words += (gen.question() + " " + gen.sentence()).split()
    return " ".join(words[: rng.randint(low, high)])


def episode_prompts(shape: EpisodeShape, seed: int, counter: TokenCounter) -> list[Prompt]:
    """The decoders' prompts, then the arrivals' in order: a function of the seed alone."""
    rng = random.Random(f"episode:{seed}")
    prompts = [
        Prompt("decoder", short_prompt(rng, shape.short_min_words, shape.short_max_words))
        for _ in range(shape.num_decoders)
    ]
    for index, kind in enumerate(shape.arrival_kinds):
        if kind == "long":
            text, _ = make_prompt(
                seed, index, "long", shape.long_tokens, shape.long_tokens + 16, counter
            )
        else:
            text = short_prompt(rng, shape.short_min_words, shape.short_max_words)
        prompts.append(Prompt(kind, text))
    return prompts


def episode_offsets(shape: EpisodeShape, seed: int) -> tuple[float, ...]:
    """The arrivals' send offsets in the episode of ``seed``: ``offsets_s``, each moved later
    by a uniform draw below ``offset_jitter_s``; a function of the seed alone."""
    rng = random.Random(f"episode-offsets:{seed}")
    return tuple(offset + rng.uniform(0.0, shape.offset_jitter_s) for offset in shape.offsets_s)


def prompts_digest(prompts: list[Prompt]) -> str:
    """What every arm of an episode must send alike: kinds and texts, in order."""
    text = "\x00".join(f"{p.kind}\x01{p.text}" for p in prompts)
    return hashlib.sha256(text.encode()).hexdigest()


def with_nonce(nonce: str, text: str) -> str:
    return f"[run {nonce}] {text}"


@dataclass
class EpisodeRecord:
    """What one arm's run of one episode recorded; times in seconds from its start."""

    episode: int
    arm: str
    position: int
    """Where the arm ran among the episode's arms (0 = first)."""
    nonce: str
    admin_patch: dict[str, Any] | None
    reset_response: dict[str, Any] | None
    started_unix_s: float
    decoders: list[RequestRecord] = field(default_factory=list)
    arrivals: list[RequestRecord] = field(default_factory=list)
    lead_start_s: float | None = None
    """When the last decoder got its first token (the lead starts)."""
    window_start_s: float | None = None
    window_end_s: float | None = None
    cut_s: float | None = None
    """When the decoders were disconnected."""
    error: str | None = None
    """Why the episode is not usable (a decoder failed before the window, say)."""
    prompts_sha256: str | None = None
    """A hash of the episode's prompts without the nonce: equal in every arm of an
    episode, which the figures check (``None`` in runs recorded before it was kept)."""

    def to_json(self) -> dict[str, Any]:
        """The record without what the seed and nonce regenerate (prompts, the decoders'
        text and token ids): chunk times are what every figure needs."""
        obj = asdict(self)
        for r in obj["decoders"]:
            r |= {"prompt": "", "text": "", "token_ids": None}
        for r in obj["arrivals"]:
            r["prompt"] = ""
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> EpisodeRecord:
        obj = dict(obj)
        obj["decoders"] = [RequestRecord(**r) for r in obj["decoders"]]
        obj["arrivals"] = [RequestRecord(**r) for r in obj["arrivals"]]
        return cls(**obj)


def _first_token_s(record: RequestRecord) -> float | None:
    return record.chunk_s[0] if record.chunk_s else None


async def _wait_first_tokens(
    records: list[RequestRecord],
    tasks: list[asyncio.Task[RequestRecord]],
    timeout_s: float,
    give_up_on_failure: bool,
) -> bool:
    """Until every stream has its first token or has ended: True if all had a first token.
    With ``give_up_on_failure``, False as soon as one ended without."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pairs = list(zip(records, tasks, strict=True))
        if all(r.chunk_s for r in records):
            return True
        if give_up_on_failure and any(t.done() and not r.chunk_s for r, t in pairs):
            return False
        if all(r.chunk_s or t.done() for r, t in pairs):
            return False
        await asyncio.sleep(0.005)
    return False


def _records(
    prompts: list[Prompt], nonce: str, max_tokens: int, offsets_s: tuple[float, ...]
) -> list[RequestRecord]:
    return [
        new_record(RequestSpec(i, p.kind, False, offset, with_nonce(nonce, p.text), 0), max_tokens)
        for i, (p, offset) in enumerate(zip(prompts, offsets_s, strict=True))
    ]


async def run_episode(
    http: httpx.AsyncClient,
    client: ClientSettings,
    shape: EpisodeShape,
    prompts: list[Prompt],
    offsets_s: tuple[float, ...],
    record: EpisodeRecord,
    first_token_timeout_s: float = 600.0,
) -> EpisodeRecord:
    """Run the episode once, as ``record``'s arm (already switched in), sending the
    arrivals at ``offsets_s`` (``episode_offsets``) after the lead; fills ``record``."""
    decoder_client = replace(client, max_tokens=shape.decoder_max_tokens)
    arrival_client = replace(client, max_tokens=shape.arrival_max_tokens)
    decoder_prompts = [p for p in prompts if p.kind == "decoder"]
    arrival_prompts = [p for p in prompts if p.kind != "decoder"]
    record.decoders = _records(
        decoder_prompts, record.nonce, shape.decoder_max_tokens, (0.0,) * len(decoder_prompts)
    )
    record.arrivals = _records(arrival_prompts, record.nonce, shape.arrival_max_tokens, offsets_s)
    record.prompts_sha256 = prompts_digest(prompts)
    t0 = time.perf_counter()
    decoders = [
        asyncio.create_task(stream_into(http, decoder_client, r, t0)) for r in record.decoders
    ]
    arrivals: list[asyncio.Task[RequestRecord]] = []
    try:
        if not await _wait_first_tokens(
            record.decoders, decoders, first_token_timeout_s, give_up_on_failure=True
        ):
            errors = [r.error for r in record.decoders if r.error]
            record.error = f"a decoding stream gave no first token: {errors[:1] or 'time-out'}"
            return record
        record.lead_start_s = max(r.chunk_s[0] for r in record.decoders)
        start_s = record.lead_start_s + shape.lead_s
        for arrival in record.arrivals:
            arrival.scheduled_s += start_s
            delay = t0 + arrival.scheduled_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            arrivals.append(asyncio.create_task(stream_into(http, arrival_client, arrival, t0)))
        if not await _wait_first_tokens(
            record.arrivals, arrivals, first_token_timeout_s, give_up_on_failure=False
        ):
            for arrival, task in zip(record.arrivals, arrivals, strict=True):
                if not arrival.chunk_s:
                    task.cancel()  # no first token in time: not waited for any longer
        firsts = [f for f in map(_first_token_s, record.arrivals) if f is not None]
        record.window_start_s = min(a.send_s or 0.0 for a in record.arrivals)
        record.window_end_s = max(firsts, default=time.perf_counter() - t0)
        await asyncio.sleep(max(0.0, t0 + record.window_end_s + shape.tail_s - time.perf_counter()))
    finally:
        record.cut_s = time.perf_counter() - t0
        ended = [t.done() for t in decoders]
        for task in decoders:
            task.cancel()
        for task in decoders:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*arrivals, return_exceptions=True)
    for arrival in record.arrivals:
        if arrival.status == "pending":
            arrival.fail("no first token within the episode's time-out")
    window_end = record.window_end_s or record.cut_s
    for decoder, ended_early in zip(record.decoders, ended, strict=True):
        decoder.end_s = decoder.end_s or record.cut_s
        if ended_early and decoder.status == "ok":
            if (decoder.end_s or 0.0) < window_end:
                decoder.fail("the decoding stream ended before the window did")
        elif decoder.status == "pending":
            decoder.status = "ok"  # cut by the harness, as every decoder should be
    failed = [r for r in (*record.decoders, *record.arrivals) if r.status != "ok"]
    if failed and record.error is None:
        record.error = f"{failed[0].kind} {failed[0].index}: {failed[0].error or ''}"[:300]
    return record


def lone_decode_step_ms(record: EpisodeRecord) -> float | None:
    """Median gap of the decoding streams during the lead, when only decoding runs."""
    if record.lead_start_s is None or record.window_start_s is None:
        return None
    gaps = [
        b - a
        for r in record.decoders
        for a, b in zip(r.chunk_s, r.chunk_s[1:], strict=False)
        if a >= record.lead_start_s and b <= record.window_start_s
    ]
    return 1000 * statistics.median(gaps) if gaps else None


def record_path(results_dir: Path, episode: int, arm: str) -> Path:
    return results_dir / "records" / f"episode-{episode}" / f"{arm}.json.gz"


def steps_path(results_dir: Path, episode: int, arm: str) -> Path:
    """Where a run's scheduler steps (``GET /admin/dlfp/steps``) are kept."""
    return results_dir / "steps" / f"episode-{episode}" / f"{arm}.json.gz"


def write_steps(path: Path, steps: list[dict[str, Any]]) -> None:
    write_json(path, {"steps": steps})


def write_record(path: Path, record: EpisodeRecord) -> None:
    write_json(path, record.to_json())


def read_record(path: Path) -> EpisodeRecord:
    with open_text(path) as f:
        return EpisodeRecord.from_json(json.load(f))


def read_records(results_dir: Path) -> dict[str, dict[int, EpisodeRecord]]:
    """Every recorded run, by arm and then episode."""
    found: dict[str, dict[int, EpisodeRecord]] = {}
    for path in sorted((results_dir / "records").glob("episode-*/*.json.gz")):
        record = read_record(path)
        found.setdefault(record.arm, {})[record.episode] = record
    return found
