"""Helpers for HTTP tests: an app on the FAKE engine, driven in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from gateway.app import create_app
from gateway.settings import Settings
from tests.fakes import FakeEngine


@asynccontextmanager
async def fake_client(
    engine: FakeEngine | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI, FakeEngine]]:
    engine = engine or FakeEngine()
    app = create_app(Settings(_env_file=None, **settings), engine)  # type: ignore[call-arg]
    async with app.router.lifespan_context(app):
        await app.state.engine_starter
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client, app, engine


def sse_data(text: str) -> list[str]:
    """The data fields of an SSE body, in order (comments dropped)."""
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def sse_json(text: str) -> list[dict[str, Any]]:
    return [json.loads(d) for d in sse_data(text) if d != "[DONE]"]
