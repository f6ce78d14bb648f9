"""The seeded workload of one trial: open-loop Poisson arrivals and distinct prompts.

Everything derives from the seed alone, through independent random streams
(arrivals, request kinds, one stream per prompt), so the same seed gives the same
arrival times and the same prompts in every arm: that is what pairs the trials.
Changing ``long_fraction`` does not move the arrivals.

Every prompt opens with a header naming its seed and index, so no two prompts
of a trial share even their first tokens (no prefix-cache hit flatters a run).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from bench.lib.text import TextGenerator, words_of
from bench.lib.tokens import TokenCounter


@dataclass(frozen=True)
class WorkloadConfig:
    num_requests: int
    """Measured requests, after the warm-up ones."""
    num_warmup: int
    rate_rps: float
    long_fraction: float = 0.5
    long_min_tokens: int = 1000
    long_max_tokens: int = 3000
    short_min_tokens: int = 20
    short_max_tokens: int = 120
    arrivals_s: tuple[float, ...] | None = None
    """An explicit schedule (seconds after the start) instead of Poisson arrivals."""

    def __post_init__(self) -> None:
        if self.num_requests < 1 or self.num_warmup < 0:
            raise ValueError("need num_requests >= 1 and num_warmup >= 0")
        if self.rate_rps <= 0:
            raise ValueError("rate_rps must be positive")
        if not 0.0 <= self.long_fraction <= 1.0:
            raise ValueError("long_fraction must lie in [0, 1]")
        for low, high in (
            (self.long_min_tokens, self.long_max_tokens),
            (self.short_min_tokens, self.short_max_tokens),
        ):
            if not 1 <= low <= high:
                raise ValueError(f"need 1 <= min <= max tokens, got {low}..{high}")
        if self.arrivals_s is not None and len(self.arrivals_s) != self.total:
            raise ValueError(f"arrivals_s has {len(self.arrivals_s)} times, need {self.total}")

    @property
    def total(self) -> int:
        return self.num_warmup + self.num_requests


@dataclass(frozen=True)
class RequestSpec:
    index: int
    kind: str
    """``long`` (agent-like) or ``short`` (chat)."""
    is_warmup: bool
    scheduled_s: float
    prompt: str
    num_prompt_tokens: int
    """The prompt's length by the harness's token counter."""

    @property
    def prompt_sha256(self) -> str:
        return hashlib.sha256(self.prompt.encode()).hexdigest()


def poisson_arrivals(seed: int, rate_rps: float, num: int) -> list[float]:
    """Send times of an open-loop Poisson process: the first at 0, then exponential gaps."""
    rng = random.Random(f"arrivals:{seed}")
    times, t = [], 0.0
    for _ in range(num):
        times.append(t)
        t += rng.expovariate(rate_rps)
    return times


def _fit(pieces: Sequence[str], suffix: str, target: int, high: int, counter: TokenCounter) -> str:
    """The shortest prefix of ``pieces`` (header kept) plus ``suffix`` with ``target`` tokens.

    Token counts grow with the number of pieces, so a binary search finds it; if
    the piece that reaches the target overshoots ``high``, step back a piece.
    """

    def text(k: int) -> str:
        return "".join(pieces[:k]) + suffix

    lo, hi = 1, len(pieces)
    while lo < hi:
        mid = (lo + hi) // 2
        if counter.count(text(mid)) >= target:
            hi = mid
        else:
            lo = mid + 1
    while lo > 1 and counter.count(text(lo)) > high:
        lo -= 1
    return text(lo)


def _grow(
    gen: TextGenerator, pieces: list[str], kind: str, target: int, counter: TokenCounter
) -> None:
    """Append pieces until a cheap running count passes ``target`` with a margin."""
    running = counter.count("".join(pieces))
    while running < target * 1.05 + 32:
        if kind == "long":
            section = gen.agent_section()
        else:
            section = words_of(" " + " ".join(gen.sentence() for _ in range(2)))
        pieces += section
        running += counter.count("".join(section))


def make_prompt(
    seed: int, index: int, kind: str, low: int, high: int, counter: TokenCounter
) -> tuple[str, int]:
    """A distinct prompt of ``low..high`` tokens (by ``counter``), and its length."""
    rng = random.Random(f"prompt:{seed}:{index}")
    gen = TextGenerator(rng)
    target = rng.randint(low, high)
    nonce = f"{rng.getrandbits(48):012x}"
    if kind == "long":
        pieces = [
            f"[Session {seed}-{index} / ticket {nonce}]\n",
            *words_of(
                "You are a software agent. Read the notes and tool output "
                "below, then answer the question at the end."
            ),
        ]
        suffix = f"\n\n## Question\n{gen.question()}"
    else:
        pieces = [f"[Chat {seed}-{index} / {nonce}] {gen.question()}"]
        suffix = ""
    _grow(gen, pieces, kind, target, counter)
    while counter.count("".join(pieces) + suffix) < target:
        _grow(gen, pieces, kind, 2 * counter.count("".join(pieces)), counter)
    text = _fit(pieces, suffix, target, high, counter)
    return text, counter.count(text)


def build_workload(config: WorkloadConfig, seed: int, counter: TokenCounter) -> list[RequestSpec]:
    """Warm-up requests first, then the measured ones, all on one open-loop schedule."""
    arrivals = list(config.arrivals_s or poisson_arrivals(seed, config.rate_rps, config.total))
    kinds_rng = random.Random(f"kinds:{seed}")
    specs = []
    for index, scheduled_s in enumerate(arrivals):
        kind = "long" if kinds_rng.random() < config.long_fraction else "short"
        low, high = (
            (config.long_min_tokens, config.long_max_tokens)
            if kind == "long"
            else (config.short_min_tokens, config.short_max_tokens)
        )
        prompt, num_tokens = make_prompt(seed, index, kind, low, high, counter)
        specs.append(
            RequestSpec(index, kind, index < config.num_warmup, scheduled_s, prompt, num_tokens)
        )
    return specs
