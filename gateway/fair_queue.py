"""The order in which queued requests get slots: fair between tenants, then by priority.

The next slot goes by deficit round robin over the tenants with a request queued,
counted in slots held: the tenant holding the fewest slots for its ``weight`` (its
deficit against its share is the largest) goes next, the earlier arrival first on a tie,
and a tenant at its ``max_concurrent`` waits. Within a tenant, the lower priority number
goes first, then the client (API key or address) streaming fewer requests, then the
earlier arrival. A tenant alone uses the whole gateway. Plain asyncio: no FastAPI import.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.tenant_limits import TenantLimits

NO_LIMITS = TenantLimits()


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


def uncount(counts: Counter[str], name: str, amount: int = 1) -> None:
    """``amount`` fewer for ``name``; a name with none left is forgotten."""
    counts[name] -= amount
    if counts[name] <= 0:
        del counts[name]


class FairQueue:
    """The queued requests, and the slots each tenant and client holds."""

    def __init__(self, tenant_limits: Callable[[str], TenantLimits | None]) -> None:
        self._tenant_limits = tenant_limits
        self.waiters: list[Waiter] = []
        self.tenant_slots: Counter[str] = Counter()
        """Slots each tenant holds: what orders the queue between tenants."""
        self.client_streams: Counter[str] = Counter()
        """Requests each client has streaming: what orders a tenant's queue between
        clients, so another client's first request does not wait behind one's fortieth."""
        self.tenant_queued: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.waiters)

    def limits(self, tenant: str) -> TenantLimits:
        return self._tenant_limits(tenant) or NO_LIMITS

    def append(self, waiter: Waiter) -> None:
        self.waiters.append(waiter)
        self.tenant_queued[waiter.tenant] += 1

    def remove(self, waiter: Waiter) -> None:
        if waiter in self.waiters:
            self.waiters.remove(waiter)
            uncount(self.tenant_queued, waiter.tenant)

    def prune(self) -> None:
        """Forget the waiters that were refused or left."""
        for waiter in [w for w in self.waiters if w.future.done()]:
            self.remove(waiter)

    def hold(self, client: str, tenant: str, num_slots: int) -> None:
        self.tenant_slots[tenant] += num_slots
        self.client_streams[client] += 1

    def release(self, client: str, tenant: str, num_slots: int) -> None:
        uncount(self.tenant_slots, tenant, num_slots)
        uncount(self.client_streams, client)

    def at_cap(self, tenant: str, num_slots: int) -> bool:
        """Whether ``tenant`` may not take ``num_slots`` more (its ``max_concurrent``)."""
        cap = self.limits(tenant).max_concurrent
        held = self.tenant_slots[tenant]
        return cap is not None and held > 0 and held + num_slots > cap

    def _within(self, waiter: Waiter) -> tuple[int, int, int]:
        return (waiter.priority, self.client_streams[waiter.client], waiter.seq)

    def _share(self, tenant: str, extra_slots: int = 0) -> float:
        return (self.tenant_slots[tenant] + extra_slots) / self.limits(tenant).weight

    def next_waiter(self) -> Waiter | None:
        """The waiter the next free slots go to; None when every tenant queued is at its
        cap."""
        best: dict[str, Waiter] = {}
        for waiter in self.waiters:
            current = best.get(waiter.tenant)
            if current is None or self._within(waiter) < self._within(current):
                best[waiter.tenant] = waiter
        eligible = [w for w in best.values() if not self.at_cap(w.tenant, w.num_slots)]
        if not eligible:
            return None
        return min(eligible, key=lambda w: (self._share(w.tenant), w.seq))

    def ahead(
        self,
        tenant: str,
        priority: int,
        client: str = "",
        waiter: Waiter | None = None,
    ) -> list[Waiter]:
        """The queued requests served before ``waiter``, or before a new request of
        ``tenant``, ``priority`` and ``client``, as things stand now. (A tenant's
        ``max_concurrent`` is left out: it only delays that tenant's own requests.)"""
        key = (
            self._within(waiter)
            if waiter is not None
            else (priority, self.client_streams[client], math.inf)
        )
        by_tenant: defaultdict[str, list[Waiter]] = defaultdict(list)
        for other_waiter in self.waiters:
            if other_waiter is not waiter:
                by_tenant[other_waiter.tenant].append(other_waiter)
        own = [w for w in by_tenant.pop(tenant, []) if self._within(w) < key]
        own_share = self._share(tenant, sum(w.num_slots for w in own))
        ahead = own
        for other, queued in by_tenant.items():
            weight = self.limits(other).weight
            held = self.tenant_slots[other]
            for w in sorted(queued, key=self._within):
                if held / weight > own_share:
                    break
                ahead.append(w)
                held += w.num_slots
        return ahead
