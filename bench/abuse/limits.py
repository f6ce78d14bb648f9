"""The scenarios of ``bench abuse`` that push one limit each: a lone surrogate as a stop
string, streams nobody reads, a reply too big, a deeply nested schema, and large bodies
before admission.

Like every scenario, each takes the ``Target`` and returns an ``Outcome``: figures, and
every pass criterion checked (or marked not measured, when the gateway does not export
what it needs).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Sequence
from typing import Any

from bench.abuse.base import (
    CHAT,
    Outcome,
    Reply,
    Target,
    counts_by,
    open_unread,
    status_line,
)

LONE_SURROGATE = "\ud800"
"""``json.dumps`` writes it as the escape ``\\ud800``, as a client's JSON would carry it."""
ACTIVE = "dlfp_active_requests"
UNFINISHED = "dlfp_engine_unfinished_requests"
RSS = "process_resident_memory_bytes"
SCHEMA_DEPTH = 200
NUM_TOOLS = 129
PROMPT_BYTES = 200_000


async def _batch(target: Target, bodies: Sequence[bytes], concurrency: int = 8) -> list[Reply]:
    gate = asyncio.Semaphore(concurrency)

    async def one(body: bytes) -> Reply:
        async with gate:
            return await target.send(CHAT, body)

    return await asyncio.gather(*(one(body) for body in bodies))


async def _rss_mb(target: Target) -> float | None:
    rss = (await target.metrics(RSS)).get(RSS)
    return None if rss is None else round(rss / 2**20, 1)


async def _settled(target: Target, name: str, value: float, timeout_s: float) -> float | None:
    """``name`` once it reads ``value`` (or its last reading after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reading = (await target.metrics(name)).get(name)
        if reading is None or reading == value or time.monotonic() > deadline:
            return reading
        await asyncio.sleep(0.25)


async def surrogate_stop(target: Target) -> Outcome:
    num = target.options.num_surrogate
    prompts = [target.words(200) for _ in range(num)]
    ordinary = [json.dumps(target.chat(p, stop=["END"], max_tokens=1)).encode() for p in prompts]
    hostile = [
        json.dumps(target.chat(p, stop=[LONE_SURROGATE], max_tokens=1)).encode() for p in prompts
    ]
    rss = [await _rss_mb(target)]
    baseline = await _batch(target, ordinary)
    rss.append(await _rss_mb(target))
    replies = await _batch(target, hostile)
    rss.append(await _rss_mb(target))
    unfinished = await _settled(target, UNFINISHED, 0.0, 5.0)
    outcome = Outcome("surrogate-stop")
    outcome.figures = {
        "by_status": counts_by([r.label for r in replies]),
        "baseline_by_status": counts_by([r.label for r in baseline]),
        "rss_mb": dict(zip(("before", "after_baseline", "after_surrogate"), rss, strict=True)),
        "unfinished": unfinished,
    }
    num_4xx = sum(r.status is not None and 400 <= r.status < 500 for r in replies)
    outcome.check(num_4xx == num, f"every request 4xx ({num - num_4xx} of {num} not)")
    outcome.check(
        None if unfinished is None else unfinished == 0,
        f"{UNFINISHED} 0 afterwards ({unfinished})",
    )
    max_mb = target.options.max_rss_growth_mb
    if None in rss:
        outcome.check(None, f"RSS growth within {max_mb:g} MB of the baseline ({RSS})")
    else:
        before, after_baseline, after = (float(v or 0) for v in rss)
        excess = (after - after_baseline) - (after_baseline - before)
        outcome.figures["rss_growth_beyond_baseline_mb"] = round(excess, 1)
        outcome.check(
            excess <= max_mb, f"RSS growth {excess:.1f} MB beyond the baseline <= {max_mb:g}"
        )
    return outcome


def _has_reply(sock: socket.socket) -> bool:
    """Whether the reply has begun (admitted, or refused), without reading any of it."""
    try:
        sock.recv(1, socket.MSG_PEEK)  # b"": closed, which is an end too
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


async def _watch_slots(
    target: Target, sockets: list[socket.socket], before: float | None, limit_s: float
) -> tuple[float | None, float | None]:
    """Seconds until every reply began, then until ``dlfp_active_requests`` was back at
    ``before``. NOTE: from the last admission, as each stream holds ``n`` slots: with
    ``max_concurrent`` below 8 x K the streams are admitted one after the other."""
    start, admitted_s = time.monotonic(), None
    while True:
        elapsed_s = time.monotonic() - start
        if admitted_s is None and all(_has_reply(sock) for sock in sockets):
            admitted_s = elapsed_s
        if admitted_s is None:
            if elapsed_s > len(sockets) * limit_s:
                return None, None
        elif before is None:
            return admitted_s, None
        elif (await target.metrics(ACTIVE)).get(ACTIVE, before) <= before:
            return admitted_s, time.monotonic() - start - admitted_s
        elif elapsed_s - admitted_s > limit_s:
            return admitted_s, None
        await asyncio.sleep(0.25)


async def stalled_readers(target: Target) -> Outcome:
    """K clients open 8-choice streams and never read: their slots must free within the
    write time-out plus 10 s, and a normal request must then be served. Each holds 8 slots
    (``n`` choices take ``n``), so the gateway needs ``max_concurrent`` of 8 x K to admit
    them all at once; with fewer, the later ones queue behind the stalled ones and are
    refused for the TTFT objective, as they should be, and the scenario says so."""
    num, limit_s = target.options.num_stalled, target.options.stream_write_timeout_s + 10
    before = (await target.metrics(ACTIVE)).get(ACTIVE)
    big = {"n": 8, "logprobs": True, "top_logprobs": 20, "max_tokens": 4000, "stream": True}
    body = json.dumps(target.chat("Tell a very long story about a river.", **big)).encode()
    sockets = [await open_unread(target, body) for _ in range(num)]
    try:
        admitted_s, free_s = await _watch_slots(target, sockets, before, limit_s)
        statuses = [await status_line(sock) for sock in sockets]
        probe = await target.send(CHAT, target.chat("Say hello.", max_tokens=4))
    finally:
        for sock in sockets:
            sock.close()
    outcome = Outcome("stalled-readers")
    outcome.figures = {
        "statuses": counts_by(statuses),
        "seconds_to_admit_all": None if admitted_s is None else round(admitted_s, 1),
        "seconds_to_free": None if free_s is None else round(free_s, 1),
        "probe": probe.label,
    }
    outcome.check(statuses.count("200") == num, f"every stalled stream admitted (200): {statuses}")
    criterion = f"slots freed within {limit_s:g} s of the last admission"
    outcome.check(None if before is None else free_s is not None, f"{criterion} ({ACTIVE})")
    outcome.check(probe.status == 200, f"the next request 200 (got {probe.label})")
    return outcome


async def reply_too_big(target: Target) -> Outcome:
    big = {"n": 8, "max_tokens": 4096, "logprobs": True, "top_logprobs": 20}
    reply = await target.send(CHAT, target.chat("Count to ten.", **big))
    outcome = Outcome("reply-too-big")
    outcome.figures = {"status": reply.label, "param": reply.param, "code": reply.code}
    outcome.check(
        reply.status == 400 and reply.param == "max_tokens",
        f"400 naming max_tokens (got {reply.label}, param {reply.param})",
    )
    return outcome


async def deep_schema(target: Target) -> Outcome:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(SCHEMA_DEPTH):
        schema = {"type": "object", "properties": {"a": schema}}
    deep = {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}
    flat = {"type": "object", "properties": {}}
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": flat}}
        for i in range(NUM_TOOLS)
    ]
    outcome = Outcome("deep-schema")
    for what, fields, param in (
        ("schema", {"response_format": deep}, "response_format.json_schema.schema"),
        ("tools", {"tools": tools}, "tools"),
    ):
        reply = await target.send(CHAT, target.chat("Fill in the form.", max_tokens=4, **fields))
        outcome.figures[what] = {"status": reply.label, "param": reply.param}
        outcome.check(
            reply.status == 400 and reply.param == param,
            f"400 naming {param} (got {reply.label}, param {reply.param})",
        )
    return outcome


async def pre_admission(target: Target) -> Outcome:
    num = target.options.num_pre_admission
    filler = target.words(PROMPT_BYTES // 5)[:PROMPT_BYTES]
    bodies = [
        json.dumps({"model": target.model, "prompt": f"Request {i}. {filler}", "max_tokens": 1})
        for i in range(num)
    ]
    limits = (await target.admin("/admin/admission") or {}).get("settings") or {}
    room = limits.get("max_concurrent", 0) + limits.get("max_queue", 0) if limits else None
    sent = [asyncio.ensure_future(target.send("/v1/completions", b.encode())) for b in bodies]
    await asyncio.sleep(0.5)
    small = {"model": target.model, "prompt": "Say hello.", "max_tokens": 1}
    probe = await target.send("/v1/completions", small)
    replies = await asyncio.gather(*sent)
    outcome = Outcome("pre-admission")
    outcome.figures = {
        "by_status": counts_by([r.label for r in replies]),
        "by_code": counts_by([r.code for r in replies if r.code is not None]),
        "probe": probe.label,
        "probe_latency_ms": round(probe.latency_s * 1000, 1),
        "room": room,
    }
    num_lost = sum(r.status is None for r in [*replies, probe])
    outcome.check(num_lost == 0, f"every request a status ({num_lost} without)")
    # One client: its share of the queue (client_share) may fill before the queue does.
    num_full = sum(r.status == 429 and r.code in ("queue_full", "client_share") for r in replies)
    criterion = (
        f"a 429 queue_full or client_share for {num} > max_concurrent + max_queue ({num_full})"
    )
    if room is None:
        outcome.check(None, f"{criterion}: GET /admin/admission not answered")
    elif num > room:
        outcome.check(num_full > 0, criterion)
    return outcome
