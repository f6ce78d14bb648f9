"""Helpers for HTTP tests: an app on the FAKE engine, driven in-process."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from gateway.app import create_app
from gateway.settings import Settings
from tests.fakes import FakeEngine


def fake_app(settings: Settings, engine: FakeEngine, freeze_heap: bool = False) -> FastAPI:
    """The app on the FAKE engine, which stands for a CPU engine: the CPU defaults. The
    start-up heap is left unfrozen unless asked: this process starts many apps."""
    return create_app(settings, engine, settings.dlfp_config("cpu"), freeze_heap=freeze_heap)


@asynccontextmanager
async def running_app(
    engine: FakeEngine, freeze_heap: bool = False, **settings: Any
) -> AsyncIterator[FastAPI]:
    """The app on ``engine`` with its lifespan running and the engine started."""
    app = fake_app(Settings(_env_file=None, **settings), engine, freeze_heap)  # type: ignore[call-arg]
    async with app.router.lifespan_context(app):
        await app.state.engine_starter
        yield app


@asynccontextmanager
async def fake_client(
    engine: FakeEngine | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI, FakeEngine]]:
    engine = engine or FakeEngine()
    async with running_app(engine, **settings) as app:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client, app, engine


@contextmanager
def served_in_thread(app: FastAPI, config: uvicorn.Config | None = None) -> Iterator[str]:
    """``app`` under uvicorn in a thread, as ``config`` says (default: a free loopback
    port); yields host:port."""
    from tests.conftest import free_port

    if config is None:
        port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield f"{config.host}:{config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


def sse_data(text: str) -> list[str]:
    """The data fields of an SSE body, in order (comments dropped)."""
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def sse_json(text: str) -> list[dict[str, Any]]:
    return [json.loads(d) for d in sse_data(text) if d != "[DONE]"]
