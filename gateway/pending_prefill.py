"""The prompts admitted but not yet streaming, and how much of each is left to prefill.

The engine does not report a prompt's progress to the gateway, so it is estimated here:
between two looks, the prompts have been prefilled at the rate admission gives
(``Admission._prefill_tokens_per_s``), spread in the engine's order. Under shortest-first that is
the smallest remaining first, as vLLM's capped steps order their candidates by
``remaining_tokens`` (``engine_worker.engine_core.prefill_order``); otherwise it is
admission order, vLLM's own.

NOTE: the order is by what is left, not by a prompt's length. A long prompt two seconds
into its prefill goes before a fresh one a few tokens shorter; counting lengths instead
predicted the fresh one to wait for nothing; its first token, 24 s later, taught the
TTFT line too slow a time per token, and the line then refused a prompt that the engine
would have served within its objective.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass


@dataclass
class _Prompt:
    seq: int
    remaining_tokens: float


class PendingPrefills:
    """Each pending prompt's tokens left to prefill, as estimated at the last ``advance``."""

    def __init__(self, now_s: float) -> None:
        self._prompts: dict[int, _Prompt] = {}
        self._seq = itertools.count()
        self._updated_s = now_s

    def __len__(self) -> int:
        return len(self._prompts)

    def advance(self, now_s: float, tokens_per_s: float | None, shortest_first: bool) -> None:
        """Count the prefill done since the last call: ``tokens_per_s`` times the seconds
        passed, given out in the engine's order. No rate, no progress."""
        elapsed_s = now_s - self._updated_s
        if elapsed_s <= 0:
            return  # NOTE: no sort for the many looks of one moment (queued rechecks)
        self._updated_s = now_s
        if not tokens_per_s or not self._prompts:
            return
        done = tokens_per_s * elapsed_s
        for prompt in self._in_order(shortest_first):
            if done <= 0:
                break
            share = min(done, prompt.remaining_tokens)
            prompt.remaining_tokens -= share
            done -= share

    def add(self, tokens: int) -> int:
        """A prompt admitted now, all of it to prefill; its key for ``remove``."""
        key = next(self._seq)
        self._prompts[key] = _Prompt(key, float(tokens))
        return key

    def remove(self, key: int) -> None:
        """Its first token came (or it ended before one)."""
        self._prompts.pop(key, None)

    def total_tokens(self) -> int:
        return math.ceil(sum(p.remaining_tokens for p in self._prompts.values()))

    def tokens_before(self, tokens: int, shortest_first: bool) -> int:
        """The tokens left to prefill before a prompt of ``tokens`` gets its own."""
        left = self._before(tokens, shortest_first)
        return math.ceil(sum(p.remaining_tokens for p in left))

    def num_before(self, tokens: int, shortest_first: bool) -> int:
        """How many prompts go before a new one of ``tokens``."""
        return len(self._before(tokens, shortest_first))

    def _before(self, tokens: int, shortest_first: bool) -> list[_Prompt]:
        """The prompts served before a new one of ``tokens``: all of them, or under
        shortest-first those with no more than ``tokens`` left (an equal one arrived
        earlier and goes first)."""
        prompts = self._prompts.values()
        if not shortest_first:
            return list(prompts)
        return [p for p in prompts if p.remaining_tokens <= tokens]

    def _in_order(self, shortest_first: bool) -> list[_Prompt]:
        prompts = list(self._prompts.values())  # admission order: the dict keeps it
        if shortest_first:
            prompts.sort(key=lambda p: (p.remaining_tokens, p.seq))
        return prompts
