"""What ``bench tiers`` sends: three request tiers with objectives of their own, arriving
in three phases whose mix changes within the run.

The tiers' objectives and the long prompts' length come from the calibration (this
machine's decode step and lone prefill rate), so the workload asks of every machine
about what it asks of this one:

- ``interactive``: a chat question of 10 to 40 words, 32 tokens streamed, TTFT within
  2 s and every gap within ``INTERACTIVE_STEPS`` decode steps of 8 streams;
- ``long``: a document of about ``LONG_PREFILL_S`` of lone prefill, 16 tokens, TTFT
  within ``LONG_TTFT_PREFILLS`` times that, gaps within 30 decode steps;
- ``batch``: a 300-token prompt, 128 tokens, TTFT within 20 s, gaps within 30 steps.

The phases, about 25 s each: ``chat`` (interactive streams nearly always decoding, a
few documents), ``documents`` (documents at ``DOCUMENTS_LOAD`` of the prefill rate, batch
jobs arriving often enough that a batch stream nearly always decodes beside them, few
chats) and ``batch`` (batch and chat streams, a document now and then). Each tier arrives
as a seeded Poisson process at its phase's rate, so the same seed sends the same requests
at the same times in every arm.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.episodes.run import short_prompt
from bench.lib.tokens import TokenCounter
from bench.lib.workload import make_prompt

TIERS = ("interactive", "long", "batch")
PHASES = ("chat", "documents", "batch")
INTERACTIVE_STEPS = 2.0
"""A chat's gaps stay within this many decode steps of 8 streams."""
LONG_PREFILL_S = 0.75
"""A document takes about this much lone prefill."""
LONG_TTFT_PREFILLS = 8.0
"""A document's TTFT objective, in its lone prefill times."""
DOCUMENTS_LOAD = 0.6
"""The documents phase offers this share of the lone prefill rate in documents (and
batch jobs add about another tenth)."""
LOOSE_STEPS = 30
"""Documents and batch jobs tolerate gaps of this many decode steps (of 8 streams)."""
MAX_LONG_TOKENS = 3000
"""Documents stay within a 4,096-token context, however fast the prefill."""
MAX_LONG_RATE_RPS = 2.0


@dataclass(frozen=True)
class Tier:
    name: str
    max_tokens: int
    ttft_slo_ms: float
    itl_slo_ms: float
    prompt_tokens: int | None
    """Counted tokens of the prompt; None: a chat question of 10 to 40 words."""


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    rates_rps: dict[str, float]
    """Arrivals per second by tier."""


@dataclass(frozen=True)
class TierPlan:
    tiers: tuple[Tier, ...]
    phases: tuple[Phase, ...]
    tail_s: float
    """After the last phase, how long unfinished requests may still finish (then they
    are cut and count as misses)."""

    def tier(self, name: str) -> Tier:
        return next(t for t in self.tiers if t.name == name)

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)


def _round10(ms: float) -> float:
    return float(max(10, math.ceil(ms / 10) * 10))


def plan_from(
    decode_step_ms_8: float,
    prefill_tokens_per_s: float,
    phase_s: float = 25.0,
    tail_s: float = 20.0,
) -> TierPlan:
    """The tiers and phases for a machine whose decode step of 8 streams and lone prefill
    rate are given."""
    long_tokens = min(MAX_LONG_TOKENS, max(64, round(LONG_PREFILL_S * prefill_tokens_per_s)))
    long_rate = min(MAX_LONG_RATE_RPS, DOCUMENTS_LOAD * prefill_tokens_per_s / long_tokens)
    tiers = (
        Tier("interactive", 32, 2000.0, _round10(INTERACTIVE_STEPS * decode_step_ms_8), None),
        Tier(
            "long",
            16,
            _round10(1000 * LONG_TTFT_PREFILLS * LONG_PREFILL_S),
            _round10(LOOSE_STEPS * decode_step_ms_8),
            long_tokens,
        ),
        Tier("batch", 128, 20_000.0, _round10(LOOSE_STEPS * decode_step_ms_8), 300),
    )
    phases = (
        Phase("chat", phase_s, {"interactive": 1.0, "long": 0.16, "batch": 0.04}),
        Phase("documents", phase_s, {"interactive": 0.08, "long": long_rate, "batch": 0.24}),
        Phase("batch", phase_s, {"interactive": 0.4, "long": 0.04, "batch": 0.4}),
    )
    return TierPlan(tiers, phases, tail_s)


@dataclass(frozen=True)
class TierRequest:
    index: int
    tier: str
    phase: str
    send_s: float
    """Seconds after the run's start."""
    prompt: str
    """Without the arm's nonce."""
    num_prompt_tokens: int
    """As the harness counted it (0 for chat questions, not counted)."""


def arrivals(plan: TierPlan, seed: int) -> list[tuple[float, str, str]]:
    """``(send_s, tier, phase)`` of every request, in time order: a Poisson process per
    tier and phase, each from its own random stream of ``seed``."""
    found = []
    start = 0.0
    for phase in plan.phases:
        for tier in TIERS:
            rate = phase.rates_rps.get(tier, 0.0)
            rng = random.Random(f"tiers:{seed}:{phase.name}:{tier}")
            t = rng.expovariate(rate) if rate > 0 else phase.duration_s
            while t < phase.duration_s:
                found.append((start + t, tier, phase.name))
                t += rng.expovariate(rate)
        start += phase.duration_s
    return sorted(found)


def requests(plan: TierPlan, seed: int, counter: TokenCounter) -> list[TierRequest]:
    """Every request of the run of ``seed``: a function of the plan and the seed alone."""
    out = []
    for index, (send_s, tier_name, phase) in enumerate(arrivals(plan, seed)):
        tier = plan.tier(tier_name)
        if tier.prompt_tokens is None:
            rng = random.Random(f"tiers-prompt:{seed}:{index}")
            text, counted = short_prompt(rng, 10, 40), 0
        else:
            kind = "long" if tier.name == "long" else "short"
            low = tier.prompt_tokens
            text, counted = make_prompt(seed, index, kind, low, low + 16, counter)
        out.append(TierRequest(index, tier_name, phase, send_s, text, counted))
    return out
