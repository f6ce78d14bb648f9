"""What every ``bench abuse`` scenario shares: the options, the target gateway, the
outcome a scenario returns and the raw-socket helpers that hostile requests need.

A scenario is an async function from a ``Target`` to an ``Outcome``; ``bench.abuse.scenarios``
maps each scenario's name to its function.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.lib.client import server_root
from bench.lib.endpoint import bearer
from bench.lib.scrape import parse_exposition
from bench.lib.stream import error_of
from bench.lib.text import TextGenerator

SCENARIO_NAMES = (
    "burst",
    "surrogate-stop",
    "stalled-readers",
    "reply-too-big",
    "deep-schema",
    "pre-admission",
    "list-bodies",
    "idle-sockets",
    "space-free-prompts",
    "distinct-schemas",
    "cold-burst",
    "slow-readers",
)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
CHAT = "/v1/chat/completions"
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class AbuseOptions:
    base_url: str
    model: str | None = None
    api_key: str | None = None
    admin_token: str | None = None
    scenarios: tuple[str, ...] = SCENARIO_NAMES
    num_burst: int = 300
    num_surrogate: int = 300
    num_stalled: int = 2
    num_pre_admission: int = 200
    num_list_bodies: int = 12
    num_idle_sockets: int = 300
    num_space_free: int = 200
    num_schemas: int = 170
    num_cold_burst: int = 200
    num_slow: int = 6
    slow_hold_s: float = 20.0
    """How long slow-readers' streams go unread."""
    ttft_slo_ms: float = 30_000.0
    """Used when ``GET /admin/dlfp`` does not give the gateway's own."""
    stream_write_timeout_s: float = 30.0
    max_rss_growth_mb: float = 8.0
    request_timeout_s: float = 120.0
    scenario_timeout_s: float = 600.0
    seed: int = 0


@dataclass
class Outcome:
    """One scenario's figures and verdict: it passed if no criterion failed."""

    scenario: str
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    """Raw per-request records, for the JSON only."""
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def check(self, ok: bool | None, criterion: str) -> None:
        """``criterion`` with its figure, e.g. "P95 refusal 0.2 s <= 1 s"; None = unmeasured."""
        if ok is None:
            self.not_measured.append(criterion)
        elif not ok:
            self.failures.append(criterion)


@dataclass(frozen=True)
class Reply:
    """What one plain (non-streamed) request got back."""

    status: int | None
    """None: no HTTP answer (connection error or time-out; ``code`` names it)."""
    latency_s: float
    code: str | None = None
    param: str | None = None
    retry_after: str | None = None

    @property
    def label(self) -> str:
        return str(self.status) if self.status is not None else "no answer"


@dataclass
class Target:
    """The gateway under test, and how to reach it."""

    client: httpx.AsyncClient
    model: str
    options: AbuseOptions
    rng: random.Random = field(default_factory=random.Random)

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.options.base_url)
        return parts.hostname or "127.0.0.1", parts.port or 80

    def chat(self, prompt: str, **fields: Any) -> dict[str, Any]:
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}], **fields}

    def words(self, num_words: int) -> str:
        """Seeded filler text of ``num_words`` words."""
        text = TextGenerator(self.rng)
        words: list[str] = []
        while len(words) < num_words:
            words.extend(text.sentence().split())
        return " ".join(words[:num_words])

    async def send(self, path: str, body: dict[str, Any] | bytes) -> Reply:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        start = time.monotonic()
        try:
            response = await self.client.post(path, content=content, headers=JSON_HEADERS)
        except httpx.HTTPError as exc:
            return Reply(None, time.monotonic() - start, code=type(exc).__name__)
        error = error_of(response.content)
        return Reply(
            response.status_code,
            time.monotonic() - start,
            code=error.get("code"),
            param=error.get("param"),
            retry_after=response.headers.get("retry-after"),
        )

    async def metrics(self, *names: str) -> dict[str, float]:
        """The named series of ``/metrics`` (summed over labels); absent ones are missing."""
        try:
            response = await self.client.get("/metrics", timeout=30.0)
        except httpx.HTTPError:
            return {}
        return parse_exposition(response.text, names) if response.status_code == 200 else {}

    async def admin(self, path: str) -> dict[str, Any] | None:
        """``GET /admin/...`` with the admin token; None if it is not answered with 200."""
        try:
            response = await self.client.get(path, headers=bearer(self.options.admin_token))
            body = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return body if isinstance(body, dict) else None


async def open_unread(target: Target, body: bytes, path: str = CHAT) -> socket.socket:
    """A raw streaming request with a small receive window, whose reply nobody reads."""
    host, port = target.address
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, port))
    auth = f"Authorization: Bearer {target.options.api_key}\r\n" if target.options.api_key else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    await loop.sock_sendall(sock, head.encode() + body)
    return sock


async def status_line(sock: socket.socket) -> str:
    """The status of the reply's first line, read only now (``?`` if none came)."""
    with contextlib.suppress(OSError, TimeoutError):
        first = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 64), 2.0)
        parts = first.split(b" ", 2)
        return parts[1].decode(errors="replace") if len(parts) > 1 else "?"
    return "?"


def counts_by(values: Sequence[object]) -> dict[str, int]:
    """How many of each value, keyed by its text."""
    return {str(k): n for k, n in sorted(Counter(values).items(), key=lambda kv: str(kv[0]))}


def check_loopback(base_url: str) -> str:
    """The server root of ``base_url``; ValueError unless it is ``http://`` on a loopback
    host (the stalled readers are plain TCP sockets)."""
    parts = urlsplit(base_url)
    if parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"{base_url}: only a loopback gateway is accepted ({parts.hostname!r})")
    if parts.scheme != "http":
        raise ValueError(f"{base_url}: give the gateway as http://HOST:PORT")
    return server_root(base_url)


Scenario = Callable[[Target], Awaitable[Outcome]]
