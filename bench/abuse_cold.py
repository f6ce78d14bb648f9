"""``cold-burst`` and ``slow-readers`` of ``bench abuse``: what the SLO check knows.

``cold-burst`` sends a burst to a gateway that has measured nothing yet: admission must
judge it from the engine's start-up fit, refusing early what it cannot serve in time.
``slow-readers`` opens Responses streams whose clients read nothing, under a 2 s TTFT
objective: the first-token samples must be the engine's, so other clients' ordinary
chats are not refused for the objective afterwards.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bench.abuse import CHAT, Outcome, Reply, Target, counts_by, open_unread, status_line
from bench.abuse_burst import burst_records, judge_burst
from bench.endpoint import bearer

COLD_MAX_REFUSAL_S = 2.0
SLOW_READER_SLO_MS = 2000.0
NUM_ORDINARY = 12
HUGE_DESCRIPTION_CHARS = 900_000
SMALL_DESCRIPTION_CHARS = 1_000
RESPONSES = "/v1/responses"


async def cold_burst(target: Target) -> Outcome:
    """Streams (200) at once at a gateway that has measured no first token: every one a
    full stream or a 429 with ``Retry-After``, refusals at a P95 within 2 s, the
    admitted P99 TTFT within the objective."""
    before = (await target.admin("/admin/admission") or {}).get("state") or {}
    records, slo_ms, source = await burst_records(target, target.options.num_cold_burst)
    outcome = judge_burst(records, slo_ms, COLD_MAX_REFUSAL_S, name="cold-burst")
    outcome.figures["ttft_slo_ms"] = f"{slo_ms:g} ({source})"
    outcome.figures["startup_prior"] = before.get("startup_prior")
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


def _slow_body(target: Target, description_chars: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"story": {"type": "string"}}}
    fmt = {
        "type": "json_schema",
        "name": "story",
        "schema": schema,
        "description": "d" * description_chars,
    }
    return {
        "model": target.model,
        "input": "Tell a very long story about a river.",
        "stream": True,
        "max_output_tokens": 2000,
        "text": {"format": fmt},
    }


async def slow_readers(target: Target) -> Outcome:
    """Responses streams (6) that nobody reads, their echoed format description as long
    as the gateway accepts, under a 2 s TTFT objective; then ordinary chats (12) from
    another client must meet no ``429 slo``."""
    outcome = Outcome("slow-readers")
    previous = await _set_ttft_slo(target, SLOW_READER_SLO_MS)
    if previous is None:
        outcome.check(None, "the TTFT objective set to 2 s (PATCH /admin/dlfp not allowed)")
        return outcome
    try:
        huge = await target.send(RESPONSES, _slow_body(target, HUGE_DESCRIPTION_CHARS))
        chars = HUGE_DESCRIPTION_CHARS if huge.status == 200 else SMALL_DESCRIPTION_CHARS
        body = json.dumps(_slow_body(target, chars)).encode()
        sockets = [
            await open_unread(target, body, RESPONSES) for _ in range(target.options.num_slow)
        ]
        try:
            await asyncio.sleep(target.options.slow_hold_s / 2)
            ordinary = await _ordinary_chats(target)
            await asyncio.sleep(target.options.slow_hold_s / 2)
            statuses = [await status_line(sock) for sock in sockets]
        finally:
            for sock in sockets:
                sock.close()
    finally:
        await _set_ttft_slo(target, previous)
    refused_slo = sum(r.status == 429 and r.code == "slo" for r in ordinary)
    outcome.figures = {
        "huge_description": {"status": huge.label, "param": huge.param},
        "slow_description_chars": chars,
        "slow_statuses": counts_by(statuses),
        "ordinary": counts_by([f"{r.label} {r.code or ''}".strip() for r in ordinary]),
        "ordinary_max_s": round(max(r.latency_s for r in ordinary), 2),
    }
    outcome.check(
        huge.status in (200, 400),
        f"a {HUGE_DESCRIPTION_CHARS:,}-character description served or refused by name "
        f"({huge.label}, param {huge.param})",
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


async def _ordinary_chats(target: Target) -> list[Reply]:
    chats = [target.chat(f"Say hello, {i}.", max_tokens=8) for i in range(NUM_ORDINARY)]
    return list(await asyncio.gather(*(target.send(CHAT, chat) for chat in chats)))
