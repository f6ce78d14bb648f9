"""No client connection takes the server from the others (quick tier, FAKE engine, a real
uvicorn socket): idle sockets are closed, probes have a listener of their own, refused
clients are not kept."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from gateway.connections import start_probe_listener
from gateway.server import uvicorn_config
from gateway.settings import Settings
from tests.conftest import free_port
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app, fake_client, served_in_thread


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The app on the FAKE engine under uvicorn as ``serve`` configures it; host:port."""
    app = fake_app(settings, FakeEngine())
    with served_in_thread(app, uvicorn_config(app, settings)) as where:
        yield where


def _settings(**extra: object) -> Settings:
    return Settings(_env_file=None, host="127.0.0.1", port=free_port(), **extra)  # type: ignore[call-arg]


def _is_closed_by_peer(sock: socket.socket, wait_s: float) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_socket_that_sends_no_request_is_closed() -> None:
    settings = _settings(header_timeout_s=0.5)
    with served(settings) as where:
        host, port = where.split(":")
        idle = socket.create_connection((host, int(port)))
        partial = socket.create_connection((host, int(port)))
        partial.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # never finished
        try:
            assert _is_closed_by_peer(idle, 30)
            assert _is_closed_by_peer(partial, 30)
        finally:
            idle.close()
            partial.close()


def test_idle_sockets_do_not_take_the_probes_or_a_request() -> None:
    settings = _settings(max_concurrent=2, max_queue=2)
    with served(settings) as where:
        host, port = where.split(":")
        # More idle sockets than admission admits and queues, many times over.
        idle = [socket.create_connection((host, int(port))) for _ in range(300)]
        try:
            with httpx.Client(base_url=f"http://{where}", timeout=30) as client:
                assert client.get("/health").status_code == 200
                assert client.get("/ready").status_code == 200
                chat = {"model": "fake-model", "max_tokens": 2}
                chat["messages"] = [{"role": "user", "content": "hi"}]
                assert client.post("/v1/chat/completions", json=chat).status_code == 200
        finally:
            for sock in idle:
                sock.close()


async def test_the_probe_listener_answers_health_and_ready() -> None:
    async with fake_client() as (_, app, engine):
        serving = app.state.gateway.serving
        port = free_port()
        listener = await start_probe_listener(serving, "127.0.0.1", port, 5.0)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                assert (await client.get("/health")).json() == {"status": "ok"}
                assert (await client.get("/ready")).status_code == 200
                assert (await client.get("/v1/models")).status_code == 404
                engine.kill()
                ready = await client.get("/ready")
                assert ready.status_code == 503 and "engine failed" in ready.json()["reason"]
        finally:
            listener.close()
            await listener.wait_closed()


async def test_a_refused_client_is_not_kept_alive() -> None:
    chat = {"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
    async with fake_client(max_concurrent=1, max_queue=0) as (client, _, engine):
        engine.delay_s = 0.05
        slow = asyncio.create_task(
            client.post("/v1/chat/completions", json=chat | {"max_tokens": 50})
        )
        while not engine.running:
            await asyncio.sleep(0)
        refused = await client.post("/v1/chat/completions", json=chat)
        assert refused.status_code == 429
        assert refused.headers["connection"] == "close" and refused.headers["retry-after"]
        await slow
