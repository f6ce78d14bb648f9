"""Which prefills a capped step serves, and in what order: ``fcfs`` or ``srpf``.

vLLM 0.32's ``schedule()`` serves every running request before it looks at
the waiting queue, so under a cap a long prompt's chunked prefill takes the
whole cap, step after step, and a short prompt that arrives meanwhile gets no
token until that prefill ends. With ``srpf`` (shortest remaining prefill
first) a capped step's prefill tokens go first to the requests with the
fewest prefill tokens left, waiting or partially prefilled; the scheduler
holds the others out of vLLM's queues for that one step.

No prefill starves: one in progress that went ``MAX_HELD_STEPS`` capped steps
without tokens is served first. Under ``priority`` scheduling, priority comes
first and SRPF orders within one priority.

Duck-typed on vLLM's ``Request`` (``num_tokens``, ``num_computed_tokens``,
``priority``, ``arrival_time``, ``request_id``): no vLLM import.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

MAX_HELD_STEPS = 4
"""Most consecutive capped steps a prefill in progress may go without tokens."""
AT_RISK, ON_TIME, OUT_OF_REACH = 0, 1, 2
"""TTFT classes under ``srpf``: a prefill the slack's rate would not finish by its TTFT
deadline (served ahead of every prefill with a later deadline, earliest deadline first),
one it would (shortest remaining first), and one no rate would (last, shortest remaining
first, at the slack's rate)."""


class Candidate(NamedTuple):
    """A request with prefill left to do, as a capped step sees it.

    NOTE: a named tuple, not a frozen dataclass: a step builds one per waiting request,
    and a tuple is built at C speed."""

    request: Any
    computed_tokens: int
    remaining_tokens: int
    is_running: bool


@dataclass
class Selection:
    """What one capped step serves: the scheduler applies it around ``schedule()``."""

    running: list[Any] = field(default_factory=list)
    """Running prefills to serve, in order (after the decodes)."""
    waiting: list[Any] = field(default_factory=list)
    """Waiting requests to serve, in order."""
    held_running: list[Any] = field(default_factory=list)
    held_waiting: list[Any] = field(default_factory=list)
    threshold_tokens: int = 0
    """Per-request token threshold for the step."""


_popped_first = attrgetter("priority", "arrival_time", "request_id")
"""vLLM's ``Request.__lt__`` as a key: priority, arrival, id (built in C, once a request)."""


def vllm_order(heap: list[Any], first: int | None = None) -> list[Any]:
    """A priority queue's heap in the order vLLM pops it (its ``first`` requests).

    NOTE: the queue iterates by popping a copy of its heap, one Python comparison at a
    time; a sort on the comparison's own key gives the same order at C speed."""
    if first is None:
        return sorted(heap, key=_popped_first)
    return heapq.nsmallest(first, heap, key=_popped_first)


def candidates_in_order(
    running_prefills: Iterable[Any],
    waiting: Iterable[Any],
    *,
    srpf: bool,
    by_priority: bool,
    starving_ids: frozenset[str] = frozenset(),
    ttft_classes: Mapping[str, tuple[int, float]] | None = None,
    deadlines_s: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """The step's prefill candidates in the order the step should serve them.

    ``fcfs`` keeps vLLM's order (running, then waiting); ``srpf`` sorts by
    (starving first, priority if ``by_priority``, out of reach last, remaining tokens,
    arrival), then moves each prefill at risk ahead of those with a later TTFT deadline
    (``srpf_order``); ``ttft_classes`` maps a request id to its class and deadline where it
    is not ``ON_TIME``, ``deadlines_s`` every candidate's deadline (where one is at risk).
    """
    candidates = prefill_candidates(running_prefills, waiting)
    if not srpf:
        return candidates
    return srpf_order(candidates, by_priority, starving_ids, ttft_classes or {}, deadlines_s)


def prefill_candidates(running_prefills: Iterable[Any], waiting: Iterable[Any]) -> list[Candidate]:
    """The requests with prefill left, in vLLM's order (running, then waiting)."""
    candidates: list[Candidate] = []
    # NOTE: a Candidate built by tuple.__new__, at C speed (its constructor is a Python
    # call, and this runs over every waiting request each step); no count of its fields is
    # checked: the tuple must list every field of Candidate, in order.
    new = tuple.__new__
    # NOTE: num_tokens, not num_prompt_tokens: a preempted request re-prefills its
    # generated tokens too.
    for is_running, requests in ((True, running_prefills), (False, waiting)):
        for r in requests:
            computed = r.num_computed_tokens
            remaining = r.num_tokens - computed
            if remaining > 0:
                candidates.append(new(Candidate, (r, computed, remaining, is_running)))
    return candidates


def srpf_order(
    candidates: Sequence[Candidate],
    by_priority: bool,
    starving_ids: frozenset[str],
    ttft_classes: Mapping[str, tuple[int, float]],
    deadlines_s: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """``candidates`` sorted as ``candidates_in_order`` sorts them under ``srpf``.

    A prefill at risk moves ahead, earliest deadline first, only of those with a later TTFT
    deadline (``deadlines_s``; a candidate without one has none) in its own block
    (starving or not, one priority). Going ahead of one with an earlier deadline cannot
    save a deadline: that one would then end when the one at risk would have, already past
    its own earlier deadline. It only delays a shorter prompt by a longer one.

    NOTE: a key part the same for every candidate (no one starving, no TTFT class, no
    priority) is left out: the order is the same, and the key is built per candidate
    on every capped step."""
    if not starving_ids and not ttft_classes:
        if by_priority:
            return sorted(candidates, key=_priority_remaining_arrival)
        return sorted(candidates, key=_remaining_arrival)
    on_time = (ON_TIME, 0.0)

    def block(c: Candidate) -> tuple[int, int]:
        request = c.request
        return (
            0 if request.request_id in starving_ids else 1,
            request.priority if by_priority else 0,
        )

    def key(c: Candidate) -> tuple[tuple[int, int], bool, int, float]:
        request = c.request
        ttft_class = ttft_classes.get(request.request_id, on_time)[0]
        return (block(c), ttft_class == OUT_OF_REACH, c.remaining_tokens, request.arrival_time)

    order = sorted(candidates, key=key)
    at_risk = sorted(
        (c for c in order if ttft_classes.get(c.request.request_id, on_time)[0] == AT_RISK),
        key=lambda c: ttft_classes[c.request.request_id][1],
    )
    if not at_risk:
        return order
    deadlines = (
        deadlines_s
        if deadlines_s is not None
        else {request_id: d for request_id, (_, d) in ttft_classes.items()}
    )
    for candidate in at_risk:
        deadline_s = ttft_classes[candidate.request.request_id][1]
        own_block = block(candidate)
        index = order.index(candidate)
        ahead = index
        while ahead > 0:
            other = order[ahead - 1]
            other_s = deadlines.get(other.request.request_id, math.inf)
            if block(other) != own_block or other_s <= deadline_s:
                break
            ahead -= 1
        if ahead < index:
            order.insert(ahead, order.pop(index))
    return order


TTFT_GUARD_SHARE = 0.05
"""The share of a prompt's TTFT objective its pace leaves before its deadline
(``paced_deadline``; why: docs/scheduler.md, "Deadline plan")."""


def paced_deadline(deadline_s: float, objective_s: float, now_s: float) -> float:
    """The deadline the pace aims a prompt at: ``TTFT_GUARD_SHARE`` of its TTFT objective
    ``objective_s`` before ``deadline_s``, and no more than half the time left to it, so
    that the rate it needs stays finite as the guard comes near: ``d - min(g T, (d -
    now) / 2)``. Past ``deadline_s`` it is past too (``needed_rate`` leaves it out)."""
    return deadline_s - min(TTFT_GUARD_SHARE * objective_s, (deadline_s - now_s) / 2)


def needed_rate(deadlines: Iterable[tuple[float, int]], now_s: float) -> float:
    """The prefill rate (tokens/s) that meets every TTFT deadline in ``deadlines``,
    ``(deadline_s, remaining_tokens)`` pairs, served earliest deadline first: the largest
    of ``sum(R_j, d_j <= d_k) / (d_k - now)`` over the deadlines ``d_k`` (EDF's
    feasibility test). A deadline already past is left out (it is overdue, not at risk);
    0 with none left."""
    rate, total = 0.0, 0
    for deadline_s, remaining in sorted(deadlines):
        left_s = deadline_s - now_s
        if left_s <= 0:
            continue
        total += remaining
        rate = max(rate, total / left_s)
    return rate


def _remaining_arrival(c: Candidate) -> tuple[int, float]:
    return (c.remaining_tokens, c.request.arrival_time)


def _priority_remaining_arrival(c: Candidate) -> tuple[int, int, float]:
    request = c.request
    return (request.priority, c.remaining_tokens, request.arrival_time)


def select(candidates: Sequence[Candidate], cap_tokens: int) -> Selection:
    """Give ``cap_tokens`` to the candidates in order; hold out those left without.

    vLLM serves running requests before waiting ones, so a running request at
    the boundary (the one that gets only part of what it needs) would take
    more than its share ahead of a waiting request chosen before it. Then the
    step's threshold shrinks to the boundary's share when that cuts no other
    chosen request, and otherwise the boundary is held out too.
    """
    chosen: list[tuple[Candidate, int]] = []
    left = cap_tokens
    num_chosen = 0
    for candidate in candidates:
        if left <= 0:
            break
        remaining = candidate.remaining_tokens
        share = remaining if remaining < left else left
        chosen.append((candidate, share))
        left -= share
        num_chosen += 1
    # NOTE: a slice, not a loop: every candidate past the cap is held (most of them).
    held = list(candidates[num_chosen:])
    threshold = cap_tokens
    if chosen and any(not c.is_running for c, _ in chosen):
        boundary, share = chosen[-1]
        if boundary.is_running and share < boundary.remaining_tokens:
            others = [c.remaining_tokens for c, _ in chosen[:-1]]
            if others and max(others) > share:
                chosen.pop()
                held.append(boundary)
            else:
                threshold = share
    return Selection(
        running=[c.request for c, _ in chosen if c.is_running],
        waiting=[c.request for c, _ in chosen if not c.is_running],
        held_running=[c.request for c in held if c.is_running],
        held_waiting=[c.request for c in held if not c.is_running],
        threshold_tokens=max(threshold, 1),
    )


def restore_order(
    original: Sequence[Any], current: Sequence[Any], held: Sequence[Any]
) -> tuple[list[Any], list[Any]]:
    """A queue after a step that reordered it: ``(kept, added)``.

    ``current`` is the queue after ``schedule()`` (it may have lost served or
    preempted requests and gained others); ``held`` were taken out for the
    step. ``kept`` holds the survivors and the held requests in their original
    order, ``added`` what the step put in (in ``current``'s order).
    """
    original_ids = {id(r) for r in original}
    present = {id(r) for r in current} | {id(r) for r in held}
    kept = [r for r in original if id(r) in present]
    added = [r for r in current if id(r) not in original_ids]
    return kept, added


def restore_reordered(
    original: Sequence[Any], reordered: Sequence[Any], current: list[Any], held: Sequence[Any]
) -> list[Any]:
    """``restore_order``'s ``kept + added`` for ``running``, which the step saw as
    ``reordered`` (``original`` less ``held``, in another order).

    NOTE: vLLM's ``schedule()`` only removes from ``running`` (preemption) and appends to
    it (the waiting requests it admits): with nothing removed, ``reordered`` is still
    its head, checked by one list comparison at C speed (identity first), and the
    step's additions are its tail."""
    num_reordered = len(reordered)
    if len(current) >= num_reordered and current[:num_reordered] == reordered:
        return [*original, *current[num_reordered:]]
    kept, added = restore_order(original, current, held)
    return kept + added
