"""A client that stops reading is ended after ``stream_write_timeout_s``; one that reads
slowly is not. The app on the FAKE engine behind a real uvicorn socket: in-memory ASGI
transports never block on send, so only a socket can show a stalled writer."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from gateway.server import UNSENT_LIMIT_BYTES, GatewayServer, limit_unsent
from gateway.settings import Settings
from tests.conftest import free_port
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app

WRITE_TIMEOUT_S = 1.0


@asynccontextmanager
async def served(**settings: Any) -> AsyncIterator[tuple[str, FastAPI]]:
    engine = FakeEngine(max_model_len=100_000)
    app = fake_app(
        Settings(  # type: ignore[call-arg]
            _env_file=None,
            stream_write_timeout_s=WRITE_TIMEOUT_S,
            max_tokens_limit=50_000,
            **settings,
        ),
        engine,
    )
    port = free_port()
    server = GatewayServer(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False),
        app.state.gateway,
        drain_s=1.0,
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    await app.state.engine_starter
    if hasattr(socket, "TCP_NOTSENT_LOWAT"):  # the gateway's own server limits unsent bytes
        (listening,) = server.servers[0].sockets
        option = listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT)
        assert option == UNSENT_LIMIT_BYTES
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        await task


def _open_stream(port: int, max_tokens: int, rcvbuf: int | None = None) -> socket.socket:
    """A raw streaming request whose reply the caller reads as it likes (or never)."""
    body = json.dumps(
        {
            "model": "fake-model",
            "prompt": "hello",
            "max_tokens": max_tokens,
            "n": 8,
            "logprobs": 5,
            "stream": True,
        }
    ).encode()
    sock = socket.socket()
    if rcvbuf is not None:  # a small window fills, and blocks the server, sooner
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


@pytest.mark.skipif(not hasattr(socket, "TCP_NOTSENT_LOWAT"), reason="no TCP_NOTSENT_LOWAT")
async def test_accepted_connections_inherit_the_unsent_limit() -> None:
    """Else Linux lets a connection's send buffer grow to 4 MB, which a client that stopped
    reading fills for tens of seconds before any write blocks and the time-out starts."""
    accepted: asyncio.Future[socket.socket] = asyncio.get_running_loop().create_future()

    def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(writer.get_extra_info("socket"))

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    limit_unsent([server])
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        sock = await asyncio.wait_for(accepted, 5)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT) == UNSENT_LIMIT_BYTES
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def _until(predicate: Any, timeout_s: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_clients_that_stop_reading_free_their_slots() -> None:
    # Each stream asks n=8 (for volume), so takes 8 slots: two fill 16.
    async with served(max_concurrent=16, max_queue=0) as (base_url, app):
        admission = app.state.gateway.admission
        port = int(base_url.rsplit(":", 1)[1])
        stalled = [_open_stream(port, 20_000, rcvbuf=4096) for _ in range(2)]
        try:
            await _until(lambda: admission.num_active == 16, 10)
            async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
                body = {"model": "fake-model", "prompt": "hi", "max_tokens": 2}
                assert (await client.post("/v1/completions", json=body)).status_code == 429
                await _until(lambda: admission.num_active == 0, WRITE_TIMEOUT_S + 10)
                assert (await client.post("/v1/completions", json=body)).status_code == 200
                metrics = (await client.get("/metrics")).text
        finally:
            for sock in stalled:  # else uvicorn's shutdown waits on them
                sock.close()
        line = 'dlfp_requests_total{endpoint="completions",outcome="client_stalled"} 2.0'
        assert line in metrics


async def test_a_slow_reader_that_makes_progress_is_served_to_the_end() -> None:
    async with served(max_concurrent=2) as (base_url, app):
        port = int(base_url.rsplit(":", 1)[1])
        sock = _open_stream(port, 1_500)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        received = bytearray()
        while not received.endswith(b"data: [DONE]\n\n") and not received.endswith(
            b"data: [DONE]\r\n\r\n"
        ):
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 16_384), 10)
            if not chunk:
                break
            received += chunk
            # Slower than the gateway writes (so its writes block), never stopped: one
            # write waits for at most uvicorn's buffer, 48 KB, at about 1.6 MB/s.
            await asyncio.sleep(0.01)
        sock.close()
        assert b"[DONE]" in received and b'"error"' not in received
        assert app.state.gateway.admission.num_active == 0
