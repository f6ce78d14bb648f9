"""What admission's SLO check knows: the first-token time the engine produced, whoever
reads it, and from the start the engine's fitted costs (quick tier: the FAKE engine, and
admission alone with a prior given by hand, and a counting clock)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any

import pytest

from engine_worker.controller.cost_model import NUM_FEATURES
from gateway.admission import Admission, AdmissionLimits, AdmissionRejected
from gateway.fair_queue import Ahead
from gateway.ttft_estimate import MAX_TOKENS_DISCOUNT, StartupPrior
from tests.fakes import FakeEngine
from tests.http_helpers import running_app
from tests.loop_turns import until

CHAT: Any = {
    "model": "fake-model",
    "max_tokens": 4,
    "stream": True,
    "messages": [{"role": "user", "content": "x"}],
}


async def test_the_first_token_is_sampled_when_the_engine_produced_it_not_when_read() -> None:
    """A client that never reads a byte: the sample is taken all the same."""
    async with running_app(FakeEngine()) as app:
        admission = app.state.gateway.admission
        body = json.dumps(CHAT).encode()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
            "client": ("127.0.0.1", 5000),
            "server": ("testserver", 80),
        }
        sent: list[str] = []
        received = False
        never = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal received
            if not received:
                received = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message["type"])
            await never.wait()  # the client reads nothing: every write blocks

        request = asyncio.create_task(app(scope, receive, send))
        # Polled: the prompt is tokenized in a worker thread. The guard is long, and
        # only catches a sample that never comes.
        async with asyncio.timeout(30):
            while admission.ttft_estimate.num_samples < 1:
                await asyncio.sleep(0.01)
        assert "http.response.body" not in sent  # not one event reached the client
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request


def _prior() -> StartupPrior:
    coefficients = [0.05, 0.08, 0.002, 0.1, 1.0, 0.0]  # 1 ms a prefill token
    assert len(coefficients) == NUM_FEATURES
    prior = StartupPrior.from_coefficients(coefficients)
    assert prior is not None
    return prior


def test_the_prior_reads_the_fit() -> None:
    prior = _prior()
    assert prior.per_token_s == pytest.approx(0.001)
    assert prior.fixed_s == pytest.approx(0.082)
    assert prior.step_s(10, 10_000) == pytest.approx(0.17)
    # 4 streams of 100 tokens, each after a prompt of 500: 4 slots free every
    # discounted 100 steps, over the prompts and half the output expected.
    steps = MAX_TOKENS_DISCOUNT * 100
    rate = prior.slots_per_s(4, 100, 500)
    assert rate == pytest.approx(4 / (steps * prior.step_s(4, 4 * (500 + steps / 2))))
    assert StartupPrior.from_coefficients([0.0] * NUM_FEATURES) is None
    # A fit that puts a decode step's whole cost in its context term, as one on an AMD
    # EPYC family 25 did (a negative intercept): still a prior.
    context_only = StartupPrior.from_coefficients([-0.001, 0.026, 0.0, 0.131, 1.27, 0.87])
    assert context_only is not None and context_only.step_s(32, 8_000) > 0.1
    assert StartupPrior.from_coefficients([1.0, 2.0]) is None


async def _fill(admission: Admission, num: int, release: asyncio.Event) -> list[asyncio.Task[None]]:
    async def stream() -> None:
        async with admission.slot(1000, ttft_slo_s=10.0, max_tokens=100):
            await release.wait()

    tasks = [asyncio.create_task(stream()) for _ in range(num)]
    await until(lambda: admission.num_active == num)
    return tasks


async def test_a_cold_gateway_refuses_on_arrival_from_its_prior() -> None:
    """Nothing measured: the prior predicts the 1,000-token prompts ahead (1 s each) and
    the wait for a slot, and a request that cannot make its objective is refused at once."""
    limits = AdmissionLimits(max_concurrent=2, max_queue=8)
    cold = Admission(limits)
    primed = Admission(limits)
    primed.prior = _prior()
    release = asyncio.Event()
    tasks = [*await _fill(cold, 2, release), *await _fill(primed, 2, release)]

    assert cold.predicted_ttft_s(1000, 0) is None  # as without a fit: no evidence, no check
    predicted = primed.predicted_ttft_s(1000, 0)
    assert predicted is not None
    # Two prompts of 1,000 tokens pending, then its own: 3 s of prefill and one mixed step.
    assert predicted == pytest.approx(max(primed._slot_wait_s(1, Ahead()), 2.0) + 0.082 + 1.0)

    with pytest.raises(AdmissionRejected) as refused:
        async with primed.slot(1000, ttft_slo_s=2.0, max_tokens=100):
            pass
    assert refused.value.reason == "slo"
    queued = asyncio.create_task(_wait_in(cold, 2.0))  # the cold one queues it instead
    await until(lambda: cold.num_queued == 1)
    release.set()
    await asyncio.gather(*tasks, queued)


async def _wait_in(admission: Admission, slo_s: float) -> None:
    async with admission.slot(1000, ttft_slo_s=slo_s, max_tokens=100):
        pass


async def test_measurements_take_over_from_the_prior() -> None:
    admission = Admission(AdmissionLimits(max_concurrent=2, max_queue=8, min_slo_samples=2))
    admission.prior = _prior()
    for _ in range(2):
        admission.ttft_estimate.add(1000, 0.1)  # far faster than the prior says
    release = asyncio.Event()
    tasks = await _fill(admission, 2, release)
    predicted = admission.predicted_ttft_s(1000, 0)
    # The measured line (0.1 s, whatever the prompt) replaces the prior's prefill of
    # 3 s; the wait for a slot is still the prior's, until hold times are measured.
    fixed_s, _ = admission.ttft_estimate.line()
    assert predicted == pytest.approx(admission._slot_wait_s(1, Ahead()) + fixed_s)
    assert predicted < 3.0
    release.set()
    await asyncio.gather(*tasks)


async def test_every_release_teaches_the_rate_while_the_prior_stands_in() -> None:
    """A prior that refused every request that would queue would never see one released
    from the queue: while it stands in, any release is a sample of the hold time."""
    limits = AdmissionLimits(max_concurrent=2, max_queue=8)
    primed = Admission(limits, clock=itertools.count(0.0, 0.01).__next__)
    primed.prior = _prior()
    cold = Admission(limits, clock=itertools.count(0.0, 0.01).__next__)
    for admission in (primed, cold):
        for _ in range(admission.service_rate.min_samples):
            async with admission.slot(10, max_tokens=100):
                pass
    assert primed.service_rate.value(2) is not None
    assert cold.service_rate.value(2) is None  # without a prior, queued releases only
