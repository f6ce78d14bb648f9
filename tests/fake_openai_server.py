"""A FAKE OpenAI-compatible streaming server with the gateway's admin and metrics routes.

``FakeOpenAIServer`` is a tiny Starlette app served by uvicorn on a free loopback
port in a background thread (the ``fake_server`` fixture). It streams SSE chunks
with a configurable delay and a final usage chunk, answers ``/metrics`` and
``PATCH /admin/dlfp``, and can be told to misbehave. It stands in for no real
server's timing: the harness tests use it, never a measurement.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "fake-model"
ADMIN_TOKEN = "fake-admin"


@dataclass
class FakeOpenAIServer:
    """A FAKE OpenAI-compatible streaming endpoint with our gateway's admin and metrics."""

    delay_s: float = 0.002
    tokens_per_chunk: int = 1
    num_missing_tokens: int = 0
    """Deliver this many tokens fewer than the usage chunk reports."""
    sends_keepalive: bool = False
    """Send an SSE comment before the first token, as the gateway does after 10 s."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    num_scrapes: int = 0
    num_busy_scrapes: int = 0
    """The next this many ``/metrics`` scrapes report one request in ``busy_gauge``."""
    num_busy_scrapes_after_stream: int = 0
    """Every stream, as it ends, sets ``num_busy_scrapes`` to this (a server slow to let go)."""
    busy_gauge: str = "dlfp_active_requests"
    events: list[str] = field(default_factory=list)
    """In order: ``busy`` or ``idle`` per scrape, ``patch`` per admin PATCH, ``request``."""
    num_resets: int = 0
    admission_limits: dict[str, Any] = field(
        default_factory=lambda: {"no_slack_check": True, "slo_check": True}
    )
    admission_patches: list[dict[str, Any]] = field(default_factory=list)
    num_steps: int = 0
    base_url: str = ""

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/models", self.models),
                Route("/v1/chat/completions", self.generate, methods=["POST"]),
                Route("/v1/completions", self.generate, methods=["POST"]),
                Route("/metrics", self.metrics),
                Route("/admin/dlfp", self.admin, methods=["PATCH"]),
                Route("/admin/dlfp", self.settings, methods=["GET"]),
                Route("/admin/dlfp/reset", self.reset, methods=["POST"]),
                Route("/admin/admission", self.admission, methods=["GET", "PATCH"]),
                Route("/admin/dlfp/steps", self.steps),
            ]
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL}]})

    async def metrics(self, request: Request) -> Response:
        self.num_scrapes += 1
        cap = 128 * (1 + self.num_scrapes % 4)
        busy = self.num_busy_scrapes > 0
        if busy:
            self.num_busy_scrapes -= 1
        self.events.append("busy" if busy else "idle")
        gauges = ("dlfp_active_requests", "dlfp_queued_requests", "dlfp_engine_unfinished_requests")
        return PlainTextResponse(
            f"# HELP dlfp_controller_cap_tokens cap\ndlfp_controller_cap_tokens {cap}.0\n"
            f"dlfp_controller_observation_seconds 0.{self.num_scrapes % 9 + 1}\n"
            f'vllm:prefix_cache_hits_total{{engine="0"}} 0.0\n'
            + "".join(f"{g} {int(busy and g == self.busy_gauge)}.0\n" for g in gauges)
        )

    async def admin(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {ADMIN_TOKEN}":
            return JSONResponse({"error": {"message": "wrong admin token"}}, status_code=403)
        patch = await request.json()
        self.patches.append(patch)
        self.events.append("patch")
        return JSONResponse({"settings": patch, "state": {}})

    async def admission(self, request: Request) -> Response:
        if request.method == "PATCH":
            patch = await request.json()
            self.admission_patches.append(patch)
            self.admission_limits |= patch
        return JSONResponse({"settings": self.admission_limits, "state": {}})

    async def settings(self, request: Request) -> Response:
        return JSONResponse({"settings": {"controller": "dlfp-ct", "gain": 0.5}, "state": {}})

    async def reset(self, request: Request) -> Response:
        self.num_resets += 1
        return JSONResponse({"settings": {}, "state": {"cap_tokens": 256}})

    async def steps(self, request: Request) -> Response:
        since = int(request.query_params.get("since", 0))
        self.num_steps += 3  # three new steps per poll, one of them mixed
        steps = [
            {
                "step_index": i,
                "num_prefill_tokens": 64 * (i % 3),
                "is_mixed": i % 3 == 1,
                "num_decoding": 2,
                "busy_ms": 50.0 + i,
                "observation_ms": 50.0 + i,
                "predicted_busy_ms": 48.0 + i,
            }
            for i in range(since, self.num_steps)
        ]
        return JSONResponse({"steps": steps, "next": self.num_steps})

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.events.append("request")
        if body.get("model") != MODEL:
            return JSONResponse({"error": {"message": "no such model"}}, status_code=404)
        chat = "messages" in body
        prompt = body["messages"][-1]["content"] if chat else str(body["prompt"])
        return StreamingResponse(self._events(body, chat, prompt), media_type="text/event-stream")

    async def _events(self, body: dict[str, Any], chat: bool, prompt: str) -> AsyncIterator[str]:
        n = int(body["max_tokens"])
        seed = int(hashlib.sha256(prompt.encode()).hexdigest()[:6], 16)
        ids = [(seed + i) % 5000 for i in range(n - self.num_missing_tokens)]
        if chat:
            yield _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        if self.sends_keepalive:
            yield ": keep-alive\n\n"
        for start in range(0, len(ids), self.tokens_per_chunk):
            await asyncio.sleep(self.delay_s)
            chunk_ids = ids[start : start + self.tokens_per_chunk]
            text = "".join(f" t{i}" for i in chunk_ids)
            choice: dict[str, Any] = {"index": 0, "finish_reason": None}
            choice |= {"delta": {"content": text}} if chat else {"text": text}
            if body.get("return_token_ids"):
                choice["token_ids"] = chunk_ids
            yield _sse({"id": "fake-1", "choices": [choice]})
        usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": n, "total_tokens": n}
        # NOTE: before the last chunks, so that the client cannot scrape before it is set.
        self.num_busy_scrapes = self.num_busy_scrapes_after_stream
        yield _sse({"id": "fake-1", "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ServedFake = TypeVar("ServedFake", bound=FakeOpenAIServer)


@contextmanager
def serving(fake: ServedFake) -> Iterator[ServedFake]:
    """``fake`` under uvicorn in a thread on a free loopback port, its ``base_url`` set."""
    port = _free_port()
    config = uvicorn.Config(
        fake.app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "the fake server did not start"
    fake.base_url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    with serving(FakeOpenAIServer()) as fake:
        yield fake
