"""Slots are shared fairly between tenants (quick tier, plain asyncio, no engine): the
next slot goes to the tenant holding the fewest for its weight, a tenant's own order
is priority then arrival, its caps hold, and the SLO check sees the same order."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from gateway.admission import Admission, AdmissionLimits, AdmissionRejected
from gateway.fair_queue import ACTIVE_S
from gateway.tenant_limits import TenantLimits
from tests.fake_clock import FakeClock
from tests.loop_turns import until


class Streams:
    """Requests holding slots until released, each task named by its tenant."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.granted: list[str] = []
        self._release: dict[int, asyncio.Event] = {}
        self._held: list[tuple[int, str]] = []
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, tenant: str, priority: int = 0, label: str = "") -> asyncio.Task[None]:
        index = len(self.tasks)
        self._release[index] = asyncio.Event()

        async def hold() -> None:
            async with self.admission.slot(10, priority=priority, client=tenant, tenant=tenant):
                self.granted.append(label or tenant)
                self._held.append((index, tenant))
                await self._release[index].wait()

        task = asyncio.ensure_future(hold())
        self.tasks.append(task)
        return task

    def release_first_of(self, tenant: str) -> None:
        """Ends the earliest granted, unreleased request of ``tenant``."""
        for held in self._held:
            if held[1] == tenant:
                self._held.remove(held)
                self._release[held[0]].set()
                return
        raise AssertionError(f"{tenant} holds no slot")

    async def turn_over(self, tenant: str) -> None:
        """Ends one of ``tenant``'s requests and waits until its slot is granted again."""
        num_granted = len(self.granted)
        self.release_first_of(tenant)
        await until(lambda: len(self.granted) == num_granted + 1)

    async def finish(self) -> None:
        for event in self._release.values():
            event.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def limits_of(table: dict[str, TenantLimits], clock: FakeClock | None = None) -> Admission:
    return Admission(
        AdmissionLimits(max_concurrent=4, max_queue=64, slo_check=False),
        clock=clock or FakeClock(),
        tenant_limits=table.get,
    )


async def test_a_tenant_with_no_slots_goes_before_one_keeping_the_queue_full() -> None:
    admission = limits_of({})
    streams = Streams(admission)
    for _ in range(12):
        streams.start("a")
    await until(lambda: admission.num_queued == 8)
    streams.start("b")
    await until(lambda: admission.num_queued == 9)
    streams.release_first_of("a")
    await until(lambda: len(streams.granted) == 5)
    assert streams.granted[-1] == "b"  # a's eight earlier requests wait behind it
    await streams.finish()


async def test_weights_share_the_slots_three_to_one() -> None:
    admission = limits_of({"big": TenantLimits(weight=3), "small": TenantLimits(weight=1)})
    admission.update_limits(AdmissionLimits(max_concurrent=8, max_queue=64, slo_check=False))
    streams = Streams(admission)
    for _ in range(20):
        streams.start("big")
        streams.start("small")
    await until(lambda: admission.num_active == 8)
    # the last free slot is left to big, under its share, rather than taken by small
    assert admission.tenant_use("big")[0] == 5
    for _ in range(2):  # each slot freed goes to the tenant furthest below its share
        await streams.turn_over("small")
    held = Counter({t: admission.tenant_use(t)[0] for t in ("big", "small")})
    assert held == {"big": 6, "small": 2}
    for _ in range(10):  # turnover keeps the shares
        await streams.turn_over("small")
        await streams.turn_over("big")
    assert admission.tenant_use("big")[0] == 6 and admission.tenant_use("small")[0] == 2
    await streams.finish()


async def test_a_tenant_alone_uses_every_slot_and_its_own_order_is_priority() -> None:
    admission = limits_of({"solo": TenantLimits(weight=0.5)})
    streams = Streams(admission)
    for _ in range(4):
        streams.start("solo")
    await until(lambda: admission.num_active == 4)
    streams.start("solo", priority=5, label="late")
    streams.start("solo", priority=-1, label="urgent")
    await until(lambda: admission.num_queued == 2)
    streams.release_first_of("solo")
    await until(lambda: len(streams.granted) == 5)
    assert streams.granted[-1] == "urgent"
    await streams.finish()


async def test_an_over_share_tenant_leaves_the_last_slot_to_an_active_one() -> None:
    clock = FakeClock(100.0)
    admission = limits_of({}, clock)
    streams = Streams(admission)
    streams.start("b")  # b is active: it sent a request ...
    await until(lambda: admission.num_active == 1)
    streams.release_first_of("b")  # ... which has ended
    await until(lambda: admission.num_active == 0)
    for _ in range(6):
        streams.start("a")
    await until(lambda: admission.num_queued == 3)
    assert admission.num_active == 3  # one slot is left for b
    streams.start("b")
    await until(lambda: streams.granted[-1:] == ["b"])  # at once, though a queues
    assert admission.tenant_use("b") == (1, 0) and admission.num_active == 4
    streams.release_first_of("b")
    await until(lambda: admission.num_active == 3)
    clock.advance(ACTIVE_S + 1)  # b has been away: a's next waiter takes the slot
    for _ in range(200):  # at its next recheck, within SLO_RECHECK_S of real time
        if admission.tenant_use("a")[0] == 4:
            break
        await asyncio.sleep(0.01)
    assert admission.tenant_use("a")[0] == 4 and admission.num_active == 4
    await streams.finish()


async def test_max_concurrent_queues_and_max_queued_refuses() -> None:
    capped = TenantLimits(max_concurrent=2, max_queued=1)
    admission = limits_of({"capped": capped})
    streams = Streams(admission)
    streams.start("capped")
    streams.start("capped")
    streams.start("capped")  # over its two slots: queued, though two are free
    await until(lambda: admission.num_queued == 1)
    assert admission.num_active == 2
    with pytest.raises(AdmissionRejected) as refused:
        async with admission.slot(10, client="capped", tenant="capped"):
            pass
    assert refused.value.reason == "tenant_max_queued"
    assert "max_queued" in str(refused.value)
    other = streams.start("other")  # the free slots go to another tenant at once
    await until(lambda: admission.num_active == 3)
    assert not other.done()
    await streams.finish()


async def test_the_slo_check_counts_only_the_requests_served_before_it() -> None:
    admission = limits_of({})
    streams = Streams(admission)
    for _ in range(20):
        streams.start("a")
    await until(lambda: admission.num_queued == 16)
    ahead_of_b = admission._ahead(0, client="b", tenant="b")
    ahead_of_a = admission._ahead(0, client="a", tenant="a")
    assert ahead_of_b.num_slots == 0  # b holds nothing: it is next
    assert ahead_of_a.num_slots == 16 and ahead_of_a.prefill_tokens == 16 * 10
    await streams.finish()
