"""The order in which queued requests get slots: fair between tenants, then by priority.

The next slot goes by deficit round robin over the tenants with a request queued,
counted in slots held: the tenant holding the fewest slots for its ``weight`` (its
deficit against its share is the largest) goes next, the earlier arrival first on a tie,
and a tenant at its ``max_concurrent`` waits. Within a tenant, the lower priority number
goes first, then the client (API key or address) that streamed fewer requests when it
queued, then the earlier arrival. A tenant alone uses the whole gateway.

Slots that free together (streams admitted together end together) would leave a tenant
that sends now and then waiting for the next such wave. So a tenant over its share of the
slots among the active tenants (those with a request in the last ``ACTIVE_S``) leaves the
last free slot (``HEADROOM_SLOTS``) to an active tenant under its share with nothing
queued: that tenant's next request starts at once, for one slot idle while it is away.

Each tenant's queue is kept in that order, with running sums of its slots and prompt
tokens, so the next waiter and what is ahead of a request are found in time that grows
with the number of tenants (and the log of the queue), not with the queue. Plain
asyncio: no FastAPI import.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gateway.tenant_limits import TenantLimits

NO_LIMITS = TenantLimits()

ACTIVE_S = 10.0
"""A tenant with a request this recent is active: the headroom is kept for it."""
HEADROOM_SLOTS = 1
"""Free slots an over-share tenant leaves to an active tenant under its share."""
NEW_SEQ = 2**62
"""The place of a request not yet queued: after every waiter of its priority and standing."""
Key = tuple[int, int, int]
"""A waiter's place within its tenant: (priority, its client's streams when it queued, seq)."""


@dataclass(eq=False)
class Waiter:
    """A queued request."""

    priority: int
    seq: int
    prefill_tokens: int
    future: asyncio.Future[None]
    num_slots: int = 1
    arrival_s: float = 0.0
    ttft_slo_s: float | None = None
    client: str = ""
    tenant: str = ""
    key: Key = (0, 0, 0)
    """Set as it queues."""


@dataclass(frozen=True)
class Ahead:
    """What is served before a request: slots to free and prompt tokens to prefill."""

    num_slots: int = 0
    prefill_tokens: int = 0


def uncount(counts: Counter[str], name: str, amount: int = 1) -> None:
    """``amount`` fewer for ``name``; a name with none left is forgotten."""
    counts[name] -= amount
    if counts[name] <= 0:
        del counts[name]


@dataclass
class _TenantQueue:
    """One tenant's waiters in their order, with the slots and tokens before each."""

    keys: list[Key] = field(default_factory=list)
    waiters: list[Waiter] = field(default_factory=list)
    _sums: tuple[list[int], list[int]] | None = None

    def insert(self, waiter: Waiter) -> None:
        index = bisect.bisect(self.keys, waiter.key)
        self.keys.insert(index, waiter.key)
        self.waiters.insert(index, waiter)
        self._sums = None

    def remove(self, waiter: Waiter) -> bool:
        index = bisect.bisect_left(self.keys, waiter.key)
        if index < len(self.waiters) and self.waiters[index] is waiter:
            del self.keys[index], self.waiters[index]
            self._sums = None
            return True
        return False

    def sums(self) -> tuple[list[int], list[int]]:
        """The slots and the prompt tokens of the waiters before each index (and of all)."""
        if self._sums is None:
            slots = list(itertools.accumulate((w.num_slots for w in self.waiters), initial=0))
            tokens = list(itertools.accumulate((w.prefill_tokens for w in self.waiters), initial=0))
            self._sums = (slots, tokens)
        return self._sums


class FairQueue:
    """The queued requests, and the slots each tenant and client holds."""

    def __init__(self, tenant_limits: Callable[[str], TenantLimits | None]) -> None:
        self._tenant_limits = tenant_limits
        self._tenants: dict[str, _TenantQueue] = {}
        self._num_waiters = 0
        self._last_seen: dict[str, float] = {}
        self.tenant_slots: Counter[str] = Counter()
        """Slots each tenant holds: what orders the queue between tenants."""
        self.client_streams: Counter[str] = Counter()
        """Requests each client has streaming: what orders a tenant's queue between
        clients, so another client's first request does not wait behind one's fortieth."""

    def __len__(self) -> int:
        return self._num_waiters

    def __iter__(self) -> Iterator[Waiter]:
        for queue in list(self._tenants.values()):
            yield from list(queue.waiters)

    def num_queued(self, tenant: str) -> int:
        queue = self._tenants.get(tenant)
        return 0 if queue is None else len(queue.waiters)

    def limits(self, tenant: str) -> TenantLimits:
        return self._tenant_limits(tenant) or NO_LIMITS

    def append(self, waiter: Waiter) -> None:
        waiter.key = (waiter.priority, self.client_streams[waiter.client], waiter.seq)
        self._tenants.setdefault(waiter.tenant, _TenantQueue()).insert(waiter)
        self._num_waiters += 1

    def remove(self, waiter: Waiter) -> None:
        queue = self._tenants.get(waiter.tenant)
        if queue is not None and queue.remove(waiter):
            self._num_waiters -= 1
            if not queue.waiters:
                del self._tenants[waiter.tenant]

    def hold(self, client: str, tenant: str, num_slots: int) -> None:
        self.tenant_slots[tenant] += num_slots
        self.client_streams[client] += 1

    def release(self, client: str, tenant: str, num_slots: int) -> None:
        uncount(self.tenant_slots, tenant, num_slots)
        uncount(self.client_streams, client)

    def seen(self, tenant: str, now_s: float) -> None:
        """A request of ``tenant`` arrived: it is active until ``ACTIVE_S`` from now."""
        self._last_seen[tenant] = now_s
        for name in [n for n, s in self._last_seen.items() if now_s - s > ACTIVE_S]:
            del self._last_seen[name]

    def held_back(
        self, tenant: str, num_slots: int, free_slots: int, capacity: int, now_s: float
    ) -> bool:
        """Whether ``tenant`` leaves the last free slots to an active tenant under its
        share with nothing queued (see the module's docstring)."""
        if free_slots - num_slots >= HEADROOM_SLOTS:
            return False
        recent = {name for name, s in self._last_seen.items() if now_s - s <= ACTIVE_S}
        active = {*recent, *self.tenant_slots, *self._tenants}
        if len(active) < 2:
            return False
        total = sum(self.limits(name).weight for name in active)

        def fair(name: str) -> float:
            return capacity * self.limits(name).weight / total

        if self.tenant_slots[tenant] + num_slots <= fair(tenant):
            return False
        return any(
            other != tenant
            and other not in self._tenants
            and self.tenant_slots[other] < fair(other)
            and not self.at_cap(other, 1)
            for other in recent
        )

    def at_cap(self, tenant: str, num_slots: int) -> bool:
        """Whether ``tenant`` may not take ``num_slots`` more (its ``max_concurrent``)."""
        cap = self.limits(tenant).max_concurrent
        held = self.tenant_slots[tenant]
        return cap is not None and held > 0 and held + num_slots > cap

    def _share(self, tenant: str, extra_slots: int = 0) -> float:
        return (self.tenant_slots[tenant] + extra_slots) / self.limits(tenant).weight

    def next_waiter(self) -> Waiter | None:
        """The waiter the next free slots go to; None when every tenant queued is at its
        cap."""
        heads = [
            queue.waiters[0]
            for tenant, queue in self._tenants.items()
            if not self.at_cap(tenant, queue.waiters[0].num_slots)
        ]
        if not heads:
            return None
        return min(heads, key=lambda w: (self._share(w.tenant), w.seq))

    def ahead(
        self, tenant: str, priority: int, client: str = "", waiter: Waiter | None = None
    ) -> Ahead:
        """What is served before ``waiter``, or before a new request of ``tenant``,
        ``priority`` and ``client``, as things stand now. (A tenant's ``max_concurrent``
        is left out: it only delays that tenant's own requests.)"""
        new_key = (priority, self.client_streams[client], NEW_SEQ)
        key = waiter.key if waiter is not None else new_key
        num_slots = num_tokens = 0
        own = self._tenants.get(tenant)
        if own is not None:
            index = bisect.bisect_left(own.keys, key)
            slots, tokens = own.sums()
            num_slots, num_tokens = slots[index], tokens[index]
        share = self._share(tenant, num_slots)
        for other, queue in self._tenants.items():
            if other == tenant:
                continue
            room = share * self.limits(other).weight - self.tenant_slots[other]
            if room < 0:
                continue
            slots, tokens = queue.sums()
            # waiter j goes first while its tenant's share, with the slots before it,
            # is at most this request's: slots[j] <= room
            taken = bisect.bisect_right(slots, room, 0, len(queue.waiters))
            num_slots += slots[taken]
            num_tokens += tokens[taken]
        return Ahead(num_slots, num_tokens)
