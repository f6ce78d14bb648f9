"""Pre-admission work is charged to its client and cancellable (quick tier, FAKE engine,
its tokenizer held by a gate): shares, turns, the deadline, and a client that leaves."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from gateway.admission import AdmissionLimits, AdmissionRejected, Reservation
from gateway.client_shares import ClientShares
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app, served_in_thread
from tests.loop_turns import until, until_polled

CHAT: Any = {"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}


async def test_a_client_holds_at_most_the_concurrency_and_its_share_of_the_queue() -> None:
    from gateway.admission import Admission

    limits = AdmissionLimits(max_concurrent=2, max_queue=8, max_client_queue_share=0.25)
    admission = Admission(limits)
    assert limits.max_client_requests() == 2 + 2
    reservations = [admission.reserve("a") for _ in range(4)]
    with pytest.raises(AdmissionRejected) as refused:
        admission.reserve("a")
    assert refused.value.reason == "client_share"
    admission.reserve("b").release()  # another client is not charged for a's

    # A reservation handed to slot() is counted until the slot counts it: no moment
    # between the two lets a fifth request in.
    release = asyncio.Event()

    async def stream(reservation: Reservation) -> None:
        async with admission.slot(10, reservation=reservation, client="a"):
            await release.wait()

    tasks = [asyncio.ensure_future(stream(r)) for r in reservations]
    with pytest.raises(AdmissionRejected):  # the tasks have not run yet
        admission.reserve("a")
    await until(lambda: admission.num_held("a") == 4)
    assert admission.num_reserved_by("a") == 0
    with pytest.raises(AdmissionRejected):
        admission.reserve("a")
    release.set()
    await asyncio.gather(*tasks)
    assert admission.num_held("a") == 0
    admission.reserve("a").release()


async def test_a_client_works_on_at_most_its_turns_at_once() -> None:
    shares = ClientShares(lambda: AdmissionLimits(max_client_pre_admission=2))
    entered: list[str] = []
    gate = asyncio.Event()

    async def work(client: str) -> None:
        async with shares.worker(client):
            entered.append(client)
            await gate.wait()

    tasks = [asyncio.create_task(work(c)) for c in ("a", "a", "a", "b")]
    await until(lambda: len(entered) == 3)
    assert sorted(entered) == ["a", "a", "b"]  # a's third waits for a turn
    gate.set()
    await asyncio.gather(*tasks)
    assert entered.count("a") == 3


@asynccontextmanager
async def clients(
    engine: FakeEngine, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, FastAPI]]:
    """Two clients of one app, from two addresses (no API keys: the address is the client)."""
    from gateway.settings import Settings

    app = fake_app(Settings(_env_file=None, **settings), engine)  # type: ignore[call-arg]
    async with app.router.lifespan_context(app):
        await app.state.engine_starter
        made = [
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=(address, 5000)),
                base_url="http://testserver",
            )
            for address in ("10.0.0.1", "10.0.0.2")
        ]
        async with made[0] as one, made[1] as two:
            yield one, two, app


async def test_one_client_cannot_take_the_queue_from_another() -> None:
    engine = FakeEngine()
    engine.tokenize_gate = threading.Event()
    settings = {"max_concurrent": 2, "max_queue": 4, "max_client_queue_share": 0.5}
    async with clients(engine, **settings) as (hog, other, app):
        # Up to the concurrency plus half the queue: 2 + 2 requests in flight.
        held = [asyncio.create_task(hog.post("/v1/chat/completions", json=CHAT)) for _ in range(4)]
        admission = app.state.gateway.admission
        await until(lambda: admission.num_reserved_by("addr:10.0.0.1") == 4)
        await until_polled(lambda: engine.num_tokenized == 1)  # the first holds the turn
        refused = await hog.post("/v1/chat/completions", json=CHAT)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "client_share"
        assert engine.num_tokenized == 1  # one turn: the hog's others wait, doing nothing
        served = asyncio.create_task(other.post("/v1/chat/completions", json=CHAT))
        await until_polled(lambda: engine.num_tokenized == 2)  # the other's turn: not queued
        engine.tokenize_gate.set()
        assert (await served).status_code == 200
        assert [r.status_code for r in await asyncio.gather(*held)] == [200] * 4


async def test_pre_admission_work_past_its_deadline_is_refused() -> None:
    engine = FakeEngine()
    engine.tokenize_gate = threading.Event()
    async with clients(engine, pre_admission_timeout_s=0.2) as (one, _, app):
        r = await one.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "pre_admission_timeout"
        assert app.state.gateway.admission.num_reserved == 0
        engine.tokenize_gate.set()


def _wait_for(done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """For a condition of a server in another thread: polled, failing only past a long
    guard, never timing the behaviour."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "not reached"
        time.sleep(0.01)


@contextmanager
def _gated_app() -> Iterator[tuple[FakeEngine, FastAPI, Callable[[], socket.socket]]]:
    """An app served in a thread on the FAKE engine, its tokenizer gated, and a way to
    send it a chat over a raw socket (closed to leave)."""
    from gateway.settings import Settings

    engine = FakeEngine()
    engine.tokenize_gate = threading.Event()
    app = fake_app(Settings(_env_file=None), engine)  # type: ignore[call-arg]
    body = json.dumps(CHAT).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    with served_in_thread(app) as where:
        host, port = where.split(":")

        def send() -> socket.socket:
            sock = socket.create_connection((host, int(port)))
            sock.sendall(head + body)
            return sock

        yield engine, app, send


def test_a_client_that_leaves_frees_its_place_at_once() -> None:
    with _gated_app() as (engine, app, send):
        sock = send()
        state = app.state.gateway
        _wait_for(lambda: state.admission.num_reserved == 1)
        assert engine.tokenize_entered.wait(30)
        sock.close()  # gone while its prompt is still in the tokenizer
        _wait_for(lambda: state.admission.num_reserved == 0)
        assert state.admission.num_reserved_by("addr:127.0.0.1") == 0
        assert not engine.tokenize_gate.is_set()  # freed before its work ended
        engine.tokenize_gate.set()


async def test_a_clients_first_request_goes_before_anothers_queued_ones() -> None:
    from gateway.admission import Admission

    admission = Admission(AdmissionLimits(max_concurrent=2, max_queue=8, slo_check=False))
    order: list[str] = []
    releases = {name: asyncio.Event() for name in ("a1", "a2", "a3", "a4", "b1")}

    async def request(name: str) -> None:
        async with admission.slot(10, client=name[0]):
            order.append(name)
            await releases[name].wait()

    streaming = [asyncio.create_task(request(n)) for n in ("a1", "a2")]
    await until(lambda: order == ["a1", "a2"])
    queued = [asyncio.create_task(request(n)) for n in ("a3", "a4")]
    await until(lambda: admission.num_queued == 2)
    late = asyncio.create_task(request("b1"))  # arrives last, holds no slot
    await until(lambda: admission.num_queued == 3)
    releases["a1"].set()
    # a still streams one request, b none: b's goes first.
    await until(lambda: len(order) == 3)
    assert order[2] == "b1"
    for event in releases.values():
        event.set()
    await asyncio.gather(*streaming, *queued, late)
    assert order == ["a1", "a2", "b1", "a3", "a4"]


async def test_a_waiter_cancelled_after_its_grant_leaves_no_count_behind() -> None:
    from gateway.admission import Admission

    admission = Admission(AdmissionLimits(max_concurrent=1, max_queue=8, slo_check=False))
    release = asyncio.Event()

    async def request(client: str) -> None:
        async with admission.slot(10, client=client):
            await release.wait()

    first = asyncio.create_task(request("a"))
    await until(lambda: admission.num_active == 1)
    queued = asyncio.create_task(request("b"))
    await until(lambda: admission.num_queued == 1)
    release.set()
    await first  # its release grants b's slot ...
    queued.cancel()  # ... and b leaves before it runs again
    with contextlib.suppress(asyncio.CancelledError):
        await queued
    assert admission.num_active == 0
    assert admission.num_held("b") == 0 and admission.num_streaming("b") == 0


def test_work_still_waiting_for_its_turn_is_cancelled_when_its_client_leaves() -> None:
    with _gated_app() as (engine, app, send):
        state = app.state.gateway
        first = send()
        assert engine.tokenize_entered.wait(30)  # holds the client's one turn
        second = send()  # waits for that turn
        _wait_for(lambda: state.admission.num_reserved == 2)
        _wait_for(lambda: state.client_shares.num_at_work("addr:127.0.0.1") == 2)
        second.close()
        _wait_for(lambda: state.admission.num_reserved == 1)
        # Cancelled, not left waiting to tokenize for nobody once the turn frees.
        _wait_for(lambda: state.client_shares.num_at_work("addr:127.0.0.1") == 1)
        engine.tokenize_gate.set()
        first.settimeout(30)
        assert first.recv(64).startswith(b"HTTP/1.1 200")
        first.close()
        _wait_for(lambda: state.admission.num_reserved == 0 and state.admission.num_active == 0)
        assert engine.num_tokenized == 1  # the second request's work never ran
