"""The scenarios of ``bench abuse`` in which one client tries to take the gateway from
everyone else: list-shaped bodies that cost the event loop, idle sockets, prompts with
no space to cut at, and distinct schemas to vet. Each measures what another client
gets meanwhile.

The other client connects from 127.0.0.2 (the loopback network is a /8 on Linux), so a
gateway without API keys, which charges a client by its address, sees two clients; with
``--api-key`` both send the same key and are one client to the gateway.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import multiprocessing
import re
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bench.abuse.base import CHAT, Outcome, Reply, Target, counts_by

OTHER_CLIENT_ADDRESS = "127.0.0.2"
LIST_BODY_BYTES = 1_015_000
SPACE_FREE_BYTES = 400_000
LAG_P99_MS = 20.0
HEALTH_MS = 100.0
IDLE_ANSWER_S = 1.0
OTHER_CLIENT_S = 2.0
LAG = "dlfp_event_loop_lag_seconds"
_SPAWN = multiprocessing.get_context("spawn")
_BUCKET = re.compile(rf'^{LAG}_bucket{{le="([^"]+)"}} (\S+)$', re.MULTILINE)


async def _lag_buckets(target: Target) -> dict[float, float]:
    """The loop-lag histogram's cumulative buckets (empty if the gateway has none)."""
    try:
        response = await target.client.get("/metrics", timeout=30.0)
    except httpx.HTTPError:
        return {}
    return {float(le): float(count) for le, count in _BUCKET.findall(response.text)}


def lag_p99_ms(before: dict[float, float], after: dict[float, float]) -> float | None:
    """The P99 of the samples taken between two scrapes: the smallest bucket bound that
    holds 99% of them (an upper bound on the P99), in ms; None without samples."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    for bound, count in zip(bounds, counts, strict=True):
        if count >= 0.99 * counts[-1]:
            return bound * 1000 if bound != float("inf") else None
    return None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


async def _timed_get(client: httpx.AsyncClient, path: str) -> Reply:
    start = time.monotonic()
    try:
        response = await client.get(path, timeout=30.0)
    except httpx.HTTPError as exc:
        return Reply(None, time.monotonic() - start, code=type(exc).__name__)
    return Reply(response.status_code, time.monotonic() - start)


def timed_post(
    url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float
) -> tuple[int | None, float, str | None]:
    """One request from ``OTHER_CLIENT_ADDRESS``: its status, seconds and error name.

    Run in a process of its own: in the process that sends the flood, the flood's own
    sending holds the interpreter, and the time measured would be the sender's."""
    transport = httpx.HTTPTransport(local_address=OTHER_CLIENT_ADDRESS)
    with httpx.Client(transport=transport, headers=headers, timeout=timeout_s) as client:
        start = time.monotonic()
        try:
            response = client.post(url, json=body)
        except httpx.HTTPError as exc:
            return None, time.monotonic() - start, type(exc).__name__
        return response.status_code, time.monotonic() - start, None


async def _other_request(target: Target, body: dict[str, Any]) -> Reply:
    url = str(target.client.base_url).rstrip("/") + CHAT
    headers = {k: v for k, v in target.client.headers.items() if k.lower() == "authorization"}
    loop = asyncio.get_running_loop()
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=_SPAWN) as pool:
        # The process starts before the clock does: only the request is timed.
        await loop.run_in_executor(pool, time.monotonic)
        status, seconds, error = await loop.run_in_executor(
            pool, timed_post, url, body, headers, target.options.request_timeout_s
        )
    return Reply(status, seconds, code=error)


async def list_bodies(target: Target) -> Outcome:
    """One client sends 1 MiB list-shaped bodies back to back, four at a time: the event
    loop's lag and /health must stay short for everyone else."""
    zeros = (LIST_BODY_BYTES - 40) // 2
    compact = (",", ":")
    body = json.dumps({"model": "no-such", "metadata": [0] * zeros}, separators=compact).encode()
    before = await _lag_buckets(target)
    gate = asyncio.Semaphore(4)

    async def one() -> Reply:
        async with gate:
            return await target.send(CHAT, body)

    sent = [asyncio.ensure_future(one()) for _ in range(target.options.num_list_bodies)]
    health: list[Reply] = []
    while not all(task.done() for task in sent):
        health.append(await _timed_get(target.client, "/health"))
        await asyncio.sleep(0.05)
    replies = [task.result() for task in sent]
    p99_ms = lag_p99_ms(before, await _lag_buckets(target))
    slowest_ms = max((r.latency_s * 1000 for r in health), default=None)
    outcome = Outcome("list-bodies")
    outcome.figures = {
        "by_status": counts_by([r.label for r in replies]),
        "loop_lag_p99_ms_at_most": p99_ms,
        "health_max_ms": None if slowest_ms is None else round(slowest_ms, 1),
        "health_probes": len(health),
    }
    outcome.check(all(r.status == 400 for r in replies), "every body a 400")
    outcome.check(
        None if p99_ms is None else p99_ms <= LAG_P99_MS,
        f"event-loop lag P99 <= {LAG_P99_MS:g} ms ({_ms(p99_ms)} ms, {LAG})",
    )
    outcome.check(
        None if slowest_ms is None else slowest_ms <= HEALTH_MS,
        f"/health within {HEALTH_MS:g} ms ({_ms(slowest_ms)} ms)",
    )
    return outcome


async def _idle_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return sock


def _is_closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def idle_sockets(target: Target) -> Outcome:
    """Connections (300) that never send a byte: the probes and a short request must be
    answered meanwhile, and the sockets closed within the header time-out."""
    host, port = target.address
    num = target.options.num_idle_sockets
    sockets = [await _idle_socket(host, port) for _ in range(num)]
    opened = time.monotonic()
    try:
        health = await _timed_get(target.client, "/health")
        ready = await _timed_get(target.client, "/ready")
        chat = await target.send(CHAT, target.chat("Say hello.", max_tokens=4))
        limit_s = 60.0
        while not all(_is_closed(s) for s in sockets) and time.monotonic() - opened < limit_s:
            await asyncio.sleep(0.25)
        closed_s = time.monotonic() - opened
        num_closed = sum(_is_closed(s) for s in sockets)
    finally:
        for sock in sockets:
            sock.close()
    outcome = Outcome("idle-sockets")
    answers = {"health": health, "ready": ready, "chat": chat}
    outcome.figures = {
        name: {"status": r.label, "seconds": round(r.latency_s, 2)} for name, r in answers.items()
    }
    outcome.figures |= {"closed": num_closed, "seconds_to_close_all": round(closed_s, 1)}
    for name, reply in answers.items():
        outcome.check(
            reply.status == 200 and reply.latency_s <= IDLE_ANSWER_S,
            f"{name} 200 within {IDLE_ANSWER_S:g} s ({reply.label}, {reply.latency_s:.2f} s)",
        )
    outcome.check(
        num_closed == num,
        f"every idle socket closed by the gateway ({num_closed} of {num}, {closed_s:.1f} s)",
    )
    return outcome


async def _while_flooded(
    target: Target, flood: list[bytes], path: str, probe: Callable[[], Awaitable[Reply]]
) -> tuple[list[Reply], Reply]:
    """Sends ``flood`` at once from the target's client, then ``probe`` from the other."""
    sent = [asyncio.ensure_future(target.send(path, body)) for body in flood]
    await asyncio.sleep(0.5)
    other = await probe()
    return list(await asyncio.gather(*sent)), other


def _judge_other(outcome: Outcome, replies: list[Reply], other: Reply) -> None:
    outcome.figures = {
        "by_status": counts_by([r.label for r in replies]),
        "by_code": counts_by([r.code for r in replies if r.code is not None]),
        "other_client": {"status": other.label, "seconds": round(other.latency_s, 2)},
    }
    lost = sum(r.status is None for r in replies)
    outcome.check(lost == 0, f"every flooding request a status ({lost} without)")
    outcome.check(
        other.status == 200 and other.latency_s <= OTHER_CLIENT_S,
        f"the other client served within {OTHER_CLIENT_S:g} s "
        f"({other.label}, {other.latency_s:.2f} s)",
    )


async def space_free_prompts(target: Target) -> Outcome:
    """Prompts (200) of 400 KB with no ASCII space from one client; another client's short
    request must be admitted and served within 2 s."""
    run = "字" * (SPACE_FREE_BYTES // 3)
    flood = [
        json.dumps(target.chat(f"{i}{run}", max_tokens=1)).encode()
        for i in range(target.options.num_space_free)
    ]
    replies, other = await _while_flooded(
        target, flood, CHAT, lambda: _other_request(target, target.chat("Hi.", max_tokens=3))
    )
    outcome = Outcome("space-free-prompts")
    _judge_other(outcome, replies, other)
    return outcome


async def distinct_schemas(target: Target) -> Outcome:
    """Requests (170) with distinct JSON schemas from one client; another client's plain chat
    (its ordinary request), then its small structured request, must each be served within
    2 s."""

    def schema_body(i: int) -> bytes:
        properties = {f"field_{i}_{j}": {"type": "string", "maxLength": 8} for j in range(40)}
        schema = {"type": "object", "properties": properties, "required": list(properties)}
        fmt = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}
        return json.dumps(target.chat("Fill it in.", max_tokens=4, response_format=fmt)).encode()

    small = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    structured = target.chat(
        "Is it fine?",
        max_tokens=8,
        response_format={"type": "json_schema", "json_schema": {"name": "ok", "schema": small}},
    )

    shaped: list[Reply] = []

    async def probe() -> Reply:
        plain = await _other_request(target, target.chat("Hi.", max_tokens=3))
        shaped.append(await _other_request(target, structured))
        return plain

    replies, other = await _while_flooded(
        target, [schema_body(i) for i in range(target.options.num_schemas)], CHAT, probe
    )
    outcome = Outcome("distinct-schemas")
    _judge_other(outcome, replies, other)
    (reply,) = shaped
    outcome.figures["other_client_structured"] = {
        "status": reply.label,
        "seconds": round(reply.latency_s, 2),
    }
    outcome.check(
        reply.status == 200 and reply.latency_s <= OTHER_CLIENT_S,
        f"the other client's small structured request served within {OTHER_CLIENT_S:g} s "
        f"({reply.label}, {reply.latency_s:.2f} s)",
    )
    return outcome
