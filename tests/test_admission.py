"""Admission control as a plain asyncio class (quick tier, no HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gateway.admission import Admission, AdmissionLimits, AdmissionRejected
from gateway.ttft_estimate import ServiceRate, StartupPrior
from tests.fake_clock import FakeClock
from tests.loop_turns import until


async def _hold(
    admission: Admission, release: asyncio.Event, log: list[str], name: str, priority: int = 0
) -> None:
    async with admission.slot(prefill_tokens=10, priority=priority):
        log.append(name)
        await release.wait()


async def test_cap_queue_and_handover_in_priority_order() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=1, max_queue=3, max_queue_wait_s=5))
    release, log = asyncio.Event(), []
    first = asyncio.create_task(_hold(admission, release, log, "first"))
    await asyncio.sleep(0)
    low = asyncio.create_task(_hold(admission, asyncio.Event(), log, "low", priority=5))
    high = asyncio.create_task(_hold(admission, asyncio.Event(), log, "high", priority=-1))
    await until(lambda: admission.num_queued == 2)
    assert log == ["first"] and admission.num_active == 1 and admission.num_queued == 2
    release.set()
    await first
    await until(lambda: len(log) == 2)
    assert log == ["first", "high"]  # lower priority value first
    assert admission.num_active == 1 and admission.num_queued == 1
    for task in (low, high):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert admission.num_active == 0 and admission.num_queued == 0


async def test_queue_full_concurrency_and_timeout() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=1, max_queue=1, max_queue_wait_s=0.05))
    release = asyncio.Event()
    holder = asyncio.create_task(_hold(admission, release, [], "a"))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(_hold(admission, asyncio.Event(), [], "b"))
    await asyncio.sleep(0)
    with pytest.raises(AdmissionRejected) as full:
        async with admission.slot(prefill_tokens=1):
            pass
    assert full.value.reason == "queue_full" and full.value.retry_after_s >= 1
    with pytest.raises(AdmissionRejected) as timeout:
        await waiter
    assert timeout.value.reason == "queue_timeout"
    admission.update_limits(AdmissionLimits(max_concurrent=1, max_queue=0))
    with pytest.raises(AdmissionRejected) as busy:
        async with admission.slot(prefill_tokens=1):
            pass
    assert busy.value.reason == "concurrency"
    release.set()
    await holder
    assert admission.num_active == 0 and admission.num_queued == 0


async def test_cancel_after_grant_passes_slot_on() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=1, max_queue=5, max_queue_wait_s=5))
    release, log = asyncio.Event(), []
    holder = asyncio.create_task(_hold(admission, release, log, "a"))
    await asyncio.sleep(0)
    leaver = asyncio.create_task(_hold(admission, asyncio.Event(), log, "leaver"))
    stayer_release = asyncio.Event()
    stayer = asyncio.create_task(_hold(admission, stayer_release, log, "stayer"))
    await until(lambda: admission.num_queued == 2)
    release.set()  # the slot is reserved for "leaver" ...
    await holder
    leaver.cancel()  # ... which leaves before it resumes
    with contextlib.suppress(asyncio.CancelledError):
        await leaver
    await until(lambda: "stayer" in log)
    assert "stayer" in log and admission.num_active == 1
    stayer_release.set()
    await stayer
    assert admission.num_active == 0


async def test_slo_check_turns_away_predicted_misses() -> None:
    clock = FakeClock()
    admission = Admission(AdmissionLimits(max_concurrent=8, min_slo_samples=2), clock=clock)
    for tokens in (100, 2000, 100, 2000):  # measure: 0.2 s per request + 1 ms per token
        async with admission.slot(prefill_tokens=tokens, ttft_slo_s=100) as ticket:
            clock.now += 0.2 + tokens / 1000
            ticket.first_token()
    assert admission.ttft_estimate.fixed_s == pytest.approx(0.2, rel=0.05)
    assert admission.ttft_estimate.per_token_s == pytest.approx(0.001, rel=0.05)
    async with admission.slot(prefill_tokens=3000, ttft_slo_s=100):
        # 3,000 tokens pending ahead + 2,000 of its own = 0.2 + 5 s > a 4 s objective.
        assert admission.predicted_ttft_s(2000, 0) == pytest.approx(5.2, rel=0.05)
        with pytest.raises(AdmissionRejected) as slo:
            async with admission.slot(prefill_tokens=2000, ttft_slo_s=4.0):
                pass
        assert slo.value.reason == "slo"
        async with admission.slot(prefill_tokens=500, ttft_slo_s=4.0):
            pass


async def test_idle_gateway_admits_a_max_context_prompt_after_short_chats() -> None:
    """Fixed per-request latency is not prefill time (it once predicted 41 s here)."""
    clock = FakeClock()
    admission = Admission(AdmissionLimits(max_concurrent=8, min_slo_samples=2), clock=clock)
    for _ in range(20):  # short chats: 30 tokens, 0.3 s to the first token (GPU-like)
        async with admission.slot(prefill_tokens=30, ttft_slo_s=2.0) as ticket:
            clock.now += 0.3
            ticket.first_token()
    async with admission.slot(prefill_tokens=4096, ttft_slo_s=2.0):
        pass


async def test_draining_refuses_new_and_queued() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=1, max_queue=4, max_queue_wait_s=5))
    release = asyncio.Event()
    holder = asyncio.create_task(_hold(admission, release, [], "a"))
    await asyncio.sleep(0)
    queued = asyncio.create_task(_hold(admission, asyncio.Event(), [], "b"))
    await asyncio.sleep(0)
    admission.reject_all_queued()
    with pytest.raises(AdmissionRejected) as drained:
        await queued
    assert drained.value.reason == "draining"
    with pytest.raises(AdmissionRejected):
        async with admission.slot(prefill_tokens=1):
            pass
    release.set()
    await holder  # the stream in flight finishes
    assert admission.num_active == 0


def _held(admission: Admission, held_s: float, num: int = 8) -> None:
    """``num`` requests admitted from the queue, each held its slot ``held_s``."""
    for _ in range(num):
        admission.service_rate.released(1, held_s, queued=True)


def test_retry_after_follows_service_rate() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=1))
    assert admission.retry_after_s() == 1  # nothing observed yet
    _held(admission, 4.0)  # one slot, held 4 s a request: 0.25 slot/s
    assert admission.service_rate.value(1) == pytest.approx(0.25)
    assert admission.retry_after_s() == 4


def test_the_slot_rate_is_littles_law_over_requests_admitted_from_the_queue() -> None:
    rate = ServiceRate(window=4, min_samples=2)
    rate.released(1, 0.1, queued=False)  # admitted at once: not a full gateway's pace
    rate.released(1, 8.0, queued=True)
    assert rate.value(32) is None  # one sample is not enough
    rate.released(3, 4.0, queued=True)  # 3 slots held 4 s: weighted by its slots
    assert rate.value(32) == pytest.approx(32 / ((8.0 + 3 * 4.0) / 4))  # 32 slots / 5 s
    for _ in range(4):  # the last 4 requests only: the load changed
        rate.released(1, 2.0, queued=True)
    assert rate.value(32) == pytest.approx(16.0)
    assert rate.value(8) == pytest.approx(4.0)  # fewer slots in use free fewer a second


async def test_the_prefill_ahead_runs_while_a_request_waits_for_its_slot() -> None:
    """Its first token waits for the later of its slot and the prefill ahead, not their sum."""
    clock = FakeClock()
    limits = AdmissionLimits(max_concurrent=1, max_queue=8, min_slo_samples=2, slo_queue_check=True)
    admission = Admission(limits, clock=clock)
    for _ in range(4):  # 10 ms a token, no fixed latency
        admission.ttft_estimate.add(100, 1.0)
        admission.ttft_estimate.add(1000, 10.0)
    _held(admission, 10.0)  # one slot held 10 s a request: 0.1 slot/s
    release = asyncio.Event()

    async def request(prefill_tokens: int) -> None:
        async with admission.slot(prefill_tokens=prefill_tokens, ttft_slo_s=30.0):
            await release.wait()

    holder = asyncio.create_task(request(2000))  # admitted, its prefill not yet done
    await asyncio.sleep(0)
    # One slot to free at 0.1 slot/s (10 s) while the 2,000 tokens ahead take about 20 s,
    # then its own 100: about 21 s, where their sum would be about 31 s.
    assert admission.predicted_ttft_s(100, priority=0) == pytest.approx(21.0, rel=0.05)
    behind = asyncio.create_task(request(100))
    await asyncio.sleep(0)
    assert admission.num_queued == 1 and not behind.done()  # queued, not refused
    release.set()
    await asyncio.gather(holder, behind)


async def _warm(clock: FakeClock, admission: Admission) -> None:
    for _ in range(2):
        async with admission.slot(prefill_tokens=100, ttft_slo_s=100) as ticket:
            clock.now += 0.2
            ticket.first_token()
    _held(admission, 10.0)  # one slot held 10 s a request: 0.1 slot/s


async def test_a_queued_request_is_refused_as_soon_as_its_slo_is_lost() -> None:
    clock = FakeClock()
    limits = AdmissionLimits(
        max_concurrent=1, max_queue=8, max_queue_wait_s=600, min_slo_samples=2, slo_queue_check=True
    )
    admission = Admission(limits, clock=clock)
    await _warm(clock, admission)
    release = asyncio.Event()
    holder = asyncio.create_task(_hold(admission, release, [], "holder"))
    await asyncio.sleep(0)

    async def queued() -> None:
        async with admission.slot(prefill_tokens=100, ttft_slo_s=30.0):
            pass

    waiter = asyncio.create_task(queued())
    await until(lambda: admission.num_queued == 1)
    # One slot to free at 0.1 slot/s, 10 s, plus 0.2 s to the first token: it may make it.
    assert admission.num_queued == 1 and not waiter.done()
    clock.now += 25.0  # no slot freed for 25 s: 25 + 10.2 > 30
    with pytest.raises(AdmissionRejected) as refused:
        # A guard, not a timing claim: refused at a recheck, never at max_queue_wait_s.
        await asyncio.wait_for(waiter, timeout=60)
    assert refused.value.reason == "slo"
    assert admission.num_queued == 0
    release.set()
    await holder


async def test_the_wait_for_a_slot_counts_on_arrival() -> None:
    """Four queued ahead at 0.1 slot/s: 50 s before a slot frees, refused on arrival."""
    clock = FakeClock()
    limits = AdmissionLimits(
        max_concurrent=1, max_queue=8, max_queue_wait_s=600, min_slo_samples=2, slo_queue_check=True
    )
    admission = Admission(limits, clock=clock)
    await _warm(clock, admission)
    release = asyncio.Event()
    tasks = [asyncio.create_task(_hold(admission, release, [], str(i))) for i in range(5)]
    await asyncio.sleep(0)
    assert admission.num_active == 1 and admission.num_queued == 4
    with pytest.raises(AdmissionRejected) as refused:
        async with admission.slot(prefill_tokens=10, ttft_slo_s=30.0):
            pass
    assert refused.value.reason == "slo"
    release.set()
    await asyncio.gather(*tasks)


async def test_an_n_choice_request_takes_n_slots() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=4, max_queue=4))
    async with admission.slot(prefill_tokens=10, num_slots=3):
        assert admission.num_active == 3
        admitted = asyncio.Event()

        async def two() -> None:
            async with admission.slot(prefill_tokens=10, num_slots=2):
                admitted.set()

        task = asyncio.create_task(two())
        await until(lambda: admission.num_queued == 1)
        assert not admitted.is_set() and admission.num_queued == 1  # 3 + 2 > 4
    await task
    assert admitted.is_set() and admission.num_active == 0
    async with admission.slot(prefill_tokens=10, num_slots=8):  # at most max_concurrent
        assert admission.num_active == 4


async def test_a_first_token_after_a_non_prefill_wait_is_no_sample() -> None:
    admission = Admission(AdmissionLimits())
    async with admission.slot(prefill_tokens=10, measured=False) as ticket:
        ticket.first_token()
    assert admission.ttft_estimate.num_samples == 0


async def test_an_estimate_learnt_in_a_slow_spell_fades_instead_of_refusing_for_ever() -> None:
    """A refused request adds no sample: without fading, a slow spell's estimate would
    refuse every contended request after the engine got fast again."""
    clock = FakeClock()
    admission = Admission(AdmissionLimits(max_concurrent=8, min_slo_samples=2), clock=clock)
    for _ in range(10):  # held prefills: 40 s from admission to first token
        async with admission.slot(prefill_tokens=300, ttft_slo_s=100) as ticket:
            clock.now += 40.0
            ticket.first_token()
    release = asyncio.Event()

    async def holder() -> None:
        async with admission.slot(prefill_tokens=20, ttft_slo_s=100):
            await release.wait()

    ahead = asyncio.create_task(holder())  # a prompt ahead: the SLO check applies
    await asyncio.sleep(0)
    with pytest.raises(AdmissionRejected) as slo:
        async with admission.slot(prefill_tokens=20, ttft_slo_s=30.0):
            pass
    assert slo.value.reason == "slo"
    clock.now += 90.0  # no first token for 90 s: the samples fade
    assert admission.predicted_ttft_s(20, 0) == 0.0  # no slot to wait for, no prefill time
    async with admission.slot(prefill_tokens=20, ttft_slo_s=30.0) as ticket:
        clock.now += 0.5  # the engine is fast again
        ticket.first_token()
    # One fresh sample outweighs the faded ones, and the estimate refuses again when due.
    assert admission.ttft_estimate.is_fresh
    assert admission.ttft_estimate.line()[0] + 20 * admission.ttft_estimate.line()[1] < 20.0
    release.set()
    await ahead


async def test_no_slack_sheds_new_requests_only_while_prompts_wait_behind_decodes() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=8, no_slack_check=True))
    admission.zero_prefill_share = 0.8  # the engine's planned steps mostly carry no prefill
    async with (
        admission.slot(prefill_tokens=500, ttft_slo_s=30.0),  # nothing ahead of it
        admission.slot(prefill_tokens=20, ttft_slo_s=30.0),  # no stream decoding yet
        admission.slot(prefill_tokens=20, ttft_slo_s=30.0) as decoding,
    ):
        decoding.first_token()  # a stream decodes: the share is of steps that hold prompts
        with pytest.raises(AdmissionRejected) as shed:
            async with admission.slot(prefill_tokens=10, ttft_slo_s=30.0):
                pass
        assert shed.value.reason == "no_slack"
        admission.zero_prefill_share = 0.2
        async with admission.slot(prefill_tokens=10, ttft_slo_s=30.0):
            pass


@contextlib.asynccontextmanager
async def _a_stream_decoding_beside(
    admission: Admission, prefill_tokens: int
) -> AsyncIterator[None]:
    """A stream past its first token, and a prompt of ``prefill_tokens`` admitted after it
    and still waiting for its own."""
    async with (
        admission.slot(prefill_tokens=20, ttft_slo_s=30.0) as decoding,
        admission.slot(prefill_tokens=prefill_tokens, ttft_slo_s=30.0),
    ):
        decoding.first_token()
        yield


async def test_no_slack_sheds_under_shortest_first_only_a_prompt_with_one_ahead() -> None:
    """Under shortest-first a chat goes before a document the decodes hold back: shedding
    it would save no one any wait. A second document waits behind the first: shed."""
    admission = Admission(
        AdmissionLimits(max_concurrent=8, no_slack_check=True), shortest_first=lambda: True
    )
    admission.zero_prefill_share = 0.8
    async with _a_stream_decoding_beside(admission, 1600):
        async with admission.slot(prefill_tokens=60, ttft_slo_s=30.0):
            pass  # admitted: nothing ahead of it in the engine's order
        with pytest.raises(AdmissionRejected) as shed:
            async with admission.slot(prefill_tokens=1700, ttft_slo_s=30.0):
                pass
        assert shed.value.reason == "no_slack"


async def test_no_slack_check_off_admits_behind_decodes_that_leave_no_slack() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=8))  # off by default
    admission.zero_prefill_share = 0.8
    async with (
        _a_stream_decoding_beside(admission, 500),
        admission.slot(prefill_tokens=10, ttft_slo_s=30.0),
    ):
        pass  # the SLO check alone judges it (no throughput measured yet): admitted


async def test_under_shortest_first_a_short_prompt_is_not_predicted_to_wait_behind_a_long_one() -> (
    None
):
    clock = FakeClock()
    shortest_first = [True]
    admission = Admission(
        AdmissionLimits(max_concurrent=8), clock=clock, shortest_first=lambda: shortest_first[0]
    )
    admission.prior = StartupPrior(
        fixed_s=0.05, per_token_s=0.002, decode_base_s=0.03, decode_per_stream_s=0.001
    )
    async with admission.slot(prefill_tokens=3000, ttft_slo_s=30.0):  # a document, pending
        short = admission.predicted_ttft_s(50, 0)
        assert short == pytest.approx(0.05 + 0.002 * 50)  # served before the document
        assert admission.predicted_ttft_s(4000, 0) == pytest.approx(0.05 + 0.002 * 7000)
        shortest_first[0] = False  # vLLM's order: behind every pending prompt
        assert admission.predicted_ttft_s(50, 0) == pytest.approx(0.05 + 0.002 * 3050)
        with pytest.raises(AdmissionRejected):
            async with admission.slot(prefill_tokens=50, ttft_slo_s=2.0):
                pass
        shortest_first[0] = True
        async with admission.slot(prefill_tokens=50, ttft_slo_s=2.0) as ticket:
            assert ticket.tokens_ahead == 50  # its sample counts only what goes before it
    assert admission.predicted_ttft_s(4000, 0) == pytest.approx(0.05 + 0.002 * 4000)


async def test_a_prompt_under_way_counts_ahead_by_what_is_left_of_it() -> None:
    """Under shortest-first the engine orders prompts by the tokens left, so a long prompt
    already prefilling goes before a fresh one a few tokens shorter: that one's prediction
    and its sample count what is left of the first, not nothing and not all of it."""
    clock = FakeClock()
    admission = Admission(
        AdmissionLimits(max_concurrent=8), clock=clock, shortest_first=lambda: True
    )
    per_token_s = 0.008
    admission.prior = StartupPrior(
        fixed_s=0.05, per_token_s=per_token_s, decode_base_s=0.03, decode_per_stream_s=0.001
    )
    async with admission.slot(prefill_tokens=1610, ttft_slo_s=30.0):
        clock.now += 2.0  # 250 of its tokens prefilled at the prior's rate
        left = 1610 - 250
        expected = 0.05 + per_token_s * (left + 1600)
        assert admission.predicted_ttft_s(1600, 0) == pytest.approx(expected)
        assert admission.predicted_ttft_s(1300, 0) == pytest.approx(0.05 + per_token_s * 1300)
        async with admission.slot(prefill_tokens=1600, ttft_slo_s=30.0) as ticket:
            assert ticket.tokens_ahead == left + 1600


async def test_progress_is_never_counted_faster_than_the_start_up_fits_lone_prefill() -> None:
    """Samples of one size shrink the measured line's slope toward 0; as a rate that would
    count every pending prompt done at once. The start-up fit bounds it; without one, no
    progress is counted."""
    clock = FakeClock()
    admission = Admission(AdmissionLimits(max_concurrent=8, min_slo_samples=2), clock=clock)
    for _ in range(4):  # one size, one time: all of it fixed latency, no time per token
        async with admission.slot(prefill_tokens=1000, ttft_slo_s=100.0) as ticket:
            clock.now += 5.0
            ticket.first_token()
    assert admission.ttft_estimate.line()[1] < 1e-3
    async with admission.slot(prefill_tokens=1000, ttft_slo_s=100.0):
        clock.now += 1.0
        async with admission.slot(prefill_tokens=1000, ttft_slo_s=100.0) as second:
            assert second.tokens_ahead == 2000  # no start-up fit: no progress counted
    admission.prior = StartupPrior(
        fixed_s=0.05, per_token_s=0.002, decode_base_s=0.03, decode_per_stream_s=0.001
    )
    async with admission.slot(prefill_tokens=1000, ttft_slo_s=100.0):
        clock.now += 1.0  # 500 tokens at the fit's lone prefill, not all 1,000
        async with admission.slot(prefill_tokens=1000, ttft_slo_s=100.0) as second:
            assert second.tokens_ahead == 500 + 1000


async def test_a_stream_that_ends_no_longer_counts_as_decoding() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=8, no_slack_check=True))
    admission.zero_prefill_share = 0.8
    for _ in range(2):
        async with admission.slot(prefill_tokens=20, ttft_slo_s=30.0) as ticket:
            ticket.first_token()
    with contextlib.suppress(asyncio.CancelledError):
        async with admission.slot(prefill_tokens=20, ttft_slo_s=30.0) as ticket:
            ticket.first_token()
            raise asyncio.CancelledError  # the client went away mid-stream
    async with (
        admission.slot(prefill_tokens=500, ttft_slo_s=30.0),
        admission.slot(prefill_tokens=10, ttft_slo_s=30.0),
    ):
        pass  # nothing decodes: not shed, though a prompt is ahead of it
