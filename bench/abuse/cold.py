"""``cold-burst`` and ``slow-readers`` of ``bench abuse``: what the SLO check knows.

``cold-burst`` sends a burst to a gateway that has measured nothing yet: admission must
judge it from the engine's start-up fit, refusing early what it cannot serve in time.
``slow-readers`` opens Responses streams whose clients read nothing for a while, under a 2 s TTFT
objective: the first-token samples must be the engine's, so other clients' ordinary
chats are not refused for the objective afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx

from bench.abuse.base import CHAT, Outcome, Reply, Target, counts_by, open_unread, status_line
from bench.abuse.burst import burst_records, judge_burst
from bench.lib.endpoint import bearer

COLD_MAX_REFUSAL_S = 2.0
NUM_COLD_CLIENTS = 4
SLOW_READER_SLO_MS = 2000.0
NUM_ORDINARY = 12
HUGE_ECHO_CHARS = 900_000
RESPONSES = "/v1/responses"


@contextlib.asynccontextmanager
async def _clients(target: Target) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Clients from ``NUM_COLD_CLIENTS`` loopback addresses when the gateway listens on
    127.0.0.1 (so that no one client's share bounds the burst), else none."""
    host, port = target.address
    if host != "127.0.0.1":
        yield []
        return
    async with contextlib.AsyncExitStack() as stack:
        made = []
        for i in range(1, NUM_COLD_CLIENTS + 1):
            transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{i}")
            client = httpx.AsyncClient(
                transport=transport,
                base_url=f"http://{host}:{port}",
                timeout=target.options.request_timeout_s,
                headers=bearer(target.options.api_key),
            )
            made.append(await stack.enter_async_context(client))
        yield made


async def cold_burst(target: Target) -> Outcome:
    """Streams (200) at once at a gateway that has measured no first token, from 4
    clients: every one a full stream or a 429 with ``Retry-After``, refusals at a P95
    within 2 s, the admitted P99 TTFT within the objective."""
    before = (await target.admin("/admin/admission") or {}).get("state") or {}
    async with _clients(target) as clients:
        records, slo_ms, source = await burst_records(
            target, target.options.num_cold_burst, clients
        )
    outcome = judge_burst(records, slo_ms, COLD_MAX_REFUSAL_S, name="cold-burst")
    outcome.figures["ttft_slo_ms"] = f"{slo_ms:g} ({source})"
    outcome.figures["startup_prior"] = before.get("startup_prior")
    outcome.figures["clients"] = len(clients) or 1
    is_cold = before.get("requests_per_s") is None and not before.get("fixed_latency_s")
    outcome.check(
        None if not before else is_cold or None,
        "a fresh gateway (GET /admin/admission: nothing measured yet)",
    )
    return outcome


async def _set_ttft_slo(target: Target, ttft_slo_ms: float) -> float | None:
    """Sets the gateway's TTFT objective; its previous value, or None if not allowed."""
    headers = bearer(target.options.admin_token)
    current = ((await target.admin("/admin/dlfp")) or {}).get("settings") or {}
    response = await target.client.patch(
        "/admin/dlfp", json={"ttft_slo_ms": ttft_slo_ms}, headers=headers
    )
    previous = current.get("ttft_slo_ms")
    return float(previous) if response.status_code == 200 and previous is not None else None


def _slow_body(target: Target, echo_chars: int) -> dict[str, Any]:
    """A plain Responses stream (so its first token is a sample of the estimate) with one
    function tool; with ``echo_chars``, the tool carries a key of that many characters
    that no model reads, which a gateway that accepts unknown tool keys echoes back."""
    tool: dict[str, Any] = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    if echo_chars:
        tool["x_note"] = "d" * echo_chars
    return {
        "model": target.model,
        "input": "Tell a very long story about a river.",
        "stream": True,
        "max_output_tokens": 32,
        "tools": [tool],
    }


async def slow_readers(target: Target) -> Outcome:
    """Under a 2 s TTFT objective: ordinary chats (12), then Responses streams (6) that
    nobody reads for ``slow_hold_s``, with as long an echo as the gateway accepts (a
    tool key no model reads), then read to their end; then ordinary chats (12) again must meet no
    ``429 slo``. Run it on a gateway whose estimate no earlier overload has filled."""
    outcome = Outcome("slow-readers")
    previous = await _set_ttft_slo(target, SLOW_READER_SLO_MS)
    if previous is None:
        outcome.check(None, "the TTFT objective set to 2 s (PATCH /admin/dlfp not allowed)")
        return outcome
    try:
        baseline = await _ordinary_chats(target)
        huge = await target.send(RESPONSES, _slow_body(target, HUGE_ECHO_CHARS))
        chars = HUGE_ECHO_CHARS if huge.status == 200 else 0
        body = json.dumps(_slow_body(target, chars)).encode()
        sockets = [
            await open_unread(target, body, RESPONSES) for _ in range(target.options.num_slow)
        ]
        try:
            await asyncio.sleep(target.options.slow_hold_s)
            statuses = [await status_line(sock) for sock in sockets]
            # Read now, as a slow client finally does: a first token timed by its reader
            # would enter the estimate now, as seconds late as the hold.
            await asyncio.gather(*(_read_to_end(sock) for sock in sockets))
            ordinary = await _ordinary_chats(target)
        finally:
            for sock in sockets:
                sock.close()
    finally:
        await _set_ttft_slo(target, previous)
    refused_slo = sum(r.status == 429 and r.code == "slo" for r in ordinary)
    outcome.figures = {
        "huge_echo": {"status": huge.label, "param": huge.param},
        "slow_echo_chars": chars,
        "slow_statuses": counts_by(statuses),
        "ordinary_before": counts_by([f"{r.label} {r.code or ''}".strip() for r in baseline]),
        "ordinary": counts_by([f"{r.label} {r.code or ''}".strip() for r in ordinary]),
        "ordinary_max_s": round(max(r.latency_s for r in ordinary), 2),
    }
    outcome.check(
        huge.status in (200, 400),
        f"a tool with an unknown key of {HUGE_ECHO_CHARS:,} characters served or refused "
        f"by name ({huge.label}, param {huge.param})",
    )
    outcome.check(
        refused_slo == 0,
        f"no ordinary chat refused for the objective ({refused_slo} of {len(ordinary)})",
    )
    outcome.check(
        all(r.status == 200 for r in ordinary),
        f"every ordinary chat served ({outcome.figures['ordinary']})",
    )
    return outcome


async def _read_to_end(sock: socket.socket, limit_s: float = 120.0) -> None:
    """Reads the reply until the stream's end, the socket's close, or ``limit_s``."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(limit_s):
            tail = b""
            while chunk := await loop.sock_recv(sock, 65536):
                joined = tail + chunk
                if b"response.completed" in joined or b"[DONE]" in joined:
                    return
                tail = joined[-64:]


async def _ordinary_chats(target: Target) -> list[Reply]:
    chats = [target.chat(f"Say hello, {i}.", max_tokens=8) for i in range(NUM_ORDINARY)]
    return list(await asyncio.gather(*(target.send(CHAT, chat) for chat in chats)))
