"""``burst`` of ``bench abuse``: many streams at once, each timed to its status line
and to its first token, judged by ``judge_burst`` (testable on hand-made records)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from bench.abuse.base import CHAT, JSON_HEADERS, Outcome, Target, counts_by
from bench.lib.stats import percentile
from bench.lib.stream import error_of

MAX_REFUSAL_S = 1.0


@dataclass
class StreamRecord:
    """One streamed request of ``burst``."""

    status: int | None
    status_s: float | None = None
    """Time to the status line (for a refusal: the time to the refusal)."""
    ttft_s: float | None = None
    is_complete: bool = False
    """The stream ended with ``[DONE]`` and no error event."""
    retry_after: str | None = None
    code: str | None = None
    """``error.code`` of a refusal or of an error event; an exception's name if no answer."""


def _quantiles_ms(values_s: Sequence[float]) -> dict[str, float | None]:
    def ms(q: float) -> float | None:
        value = percentile(values_s, q)
        return None if value is None else round(value * 1000, 1)

    return {"p50": ms(50), "p95": ms(95), "p99": ms(99)}


def judge_burst(
    records: Sequence[StreamRecord],
    ttft_slo_ms: float,
    max_refusal_s: float = MAX_REFUSAL_S,
    name: str = "burst",
) -> Outcome:
    """Every request a full stream or a 429/503 with Retry-After, the P95 time to a
    refusal within ``max_refusal_s``, the admitted requests' P99 TTFT within the SLO."""
    outcome = Outcome(name)
    served = [r for r in records if r.status == 200 and r.is_complete]
    refused = [r for r in records if r.status in (429, 503)]
    ttfts = [r.ttft_s for r in records if r.status == 200 and r.ttft_s is not None]
    refusal_s = [r.status_s for r in refused if r.status_s is not None]
    slo_s = ttft_slo_ms / 1000
    outcome.figures = {
        "num_requests": len(records),
        "by_status": counts_by([r.status or "no answer" for r in records]),
        "by_code": counts_by([r.code for r in records if r.code is not None]),
        "num_within_slo": sum(r.ttft_s is not None and r.ttft_s <= slo_s for r in served),
        "ttft_ms": _quantiles_ms(ttfts),
        "refusal_ms": _quantiles_ms(refusal_s),
    }
    num_bad = len(records) - len(served) - sum(r.retry_after is not None for r in refused)
    outcome.check(
        num_bad == 0, f"every request a full stream or a 429/503 with Retry-After ({num_bad} not)"
    )
    p95 = percentile(refusal_s, 95)
    if p95 is not None:
        outcome.check(
            p95 <= max_refusal_s, f"P95 time to a refusal {p95:.2f} s <= {max_refusal_s:g} s"
        )
    p99 = percentile(ttfts, 99)
    if p99 is not None:
        outcome.check(
            p99 <= slo_s, f"admitted P99 TTFT {p99 * 1000:.0f} ms <= SLO {ttft_slo_ms:.0f} ms"
        )
    outcome.records = [asdict(r) for r in records]
    return outcome


def _has_token(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices") or []
    return any((c.get("delta") or {}).get("content") or c.get("finish_reason") for c in choices)


async def _stream(client: httpx.AsyncClient, body: bytes) -> StreamRecord:
    start = time.monotonic()
    record = StreamRecord(None)
    try:
        async with client.stream("POST", CHAT, content=body, headers=JSON_HEADERS) as response:
            record.status, record.status_s = response.status_code, time.monotonic() - start
            record.retry_after = response.headers.get("retry-after")
            if response.status_code != 200:
                record.code = error_of(await response.aread()).get("code")
                return record
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    record.is_complete = record.code is None
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    record.code = str((chunk["error"] or {}).get("code") or "stream_error")
                elif record.ttft_s is None and _has_token(chunk):
                    record.ttft_s = time.monotonic() - start
    except (httpx.HTTPError, ValueError) as exc:
        record.code = record.code or type(exc).__name__
    return record


async def _ttft_slo_ms(target: Target) -> tuple[float, str]:
    settings = (await target.admin("/admin/dlfp") or {}).get("settings") or {}
    value = settings.get("ttft_slo_ms")
    if isinstance(value, int | float):
        return float(value), "GET /admin/dlfp"
    return target.options.ttft_slo_ms, "--ttft-slo-ms"


async def burst_records(
    target: Target, num: int, clients: Sequence[httpx.AsyncClient] = ()
) -> tuple[list[StreamRecord], float, str]:
    """``num`` streams sent at once, by turns from ``clients`` (else the target's); their
    records, and the TTFT objective with its source."""
    slo_ms, source = await _ttft_slo_ms(target)
    bodies = [
        target.chat(
            f"Request {i}. {target.words(target.rng.randint(50, 250))}", max_tokens=32, stream=True
        )
        for i in range(num)
    ]
    encoded = [json.dumps(body).encode() for body in bodies]
    senders = list(clients) or [target.client]
    streams = (_stream(senders[i % len(senders)], body) for i, body in enumerate(encoded))
    records = await asyncio.gather(*streams)
    return list(records), slo_ms, source


async def burst(target: Target) -> Outcome:
    records, slo_ms, source = await burst_records(target, target.options.num_burst)
    outcome = judge_burst(records, slo_ms)
    outcome.figures["ttft_slo_ms"] = f"{slo_ms:g} ({source})"
    return outcome
