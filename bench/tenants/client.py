"""A tenant's requests: one timed stream, and a closed loop of streams that floods the
gateway until the bench stops it.

Every request is recorded in ``Run.records`` as it is sent, so progress lines and the
report see the ones still in flight. A stream the bench closes at the end of the load is
recorded as ``cut``: the gateway aborts it and releases its slots then, which is what
ends its slot-seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import httpx

from bench.lib.endpoint import bearer
from bench.lib.stream import error_of, parse_data
from bench.tenants.base import CHAT, Run, TenantRecord

REFUSAL_PAUSE_S = 0.5
"""How long a flooding stream waits after a refusal before its next request."""
FLOOD_PROMPT_WORDS = 60


def _seconds(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


async def _read(response: httpx.Response, record: TenantRecord, sent: float) -> None:
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line.removeprefix("data:").strip()
        event = parse_data(data, chat=True)
        now = time.monotonic() - sent
        if event is None:
            record.is_complete = record.code is None
            record.e2e_s = now
            return
        if event.error is not None:
            record.code, record.message = "stream_error", event.error
        elif event.is_content and record.ttft_s is None:
            record.ttft_s = now
        if event.usage is not None:
            record.prompt_tokens = event.usage.get("prompt_tokens")
            record.completion_tokens = event.usage.get("completion_tokens")


async def stream_chat(
    run: Run, tenant: str, kind: str, max_tokens: int, prompt: str
) -> TenantRecord:
    """One streamed chat request of ``tenant``, recorded in ``run.records``."""
    record = TenantRecord(tenant, kind, max_tokens, run.since_start())
    run.records.append(record)
    body = json.dumps(run.chat(prompt, max_tokens)).encode()
    headers = {"Content-Type": "application/json"} | bearer(run.key(tenant))
    sent = time.monotonic()
    try:
        async with run.client.stream("POST", CHAT, content=body, headers=headers) as response:
            record.status = response.status_code
            record.retry_after_s = _seconds(response.headers.get("retry-after"))
            if response.status_code != 200:
                error = error_of(await response.aread())
                record.code = str(error.get("code") or error.get("type") or "-")
                record.message = error.get("message")
                return record
            await _read(response, record, sent)
    except asyncio.CancelledError:
        record.code = "cut"
        raise
    except (httpx.HTTPError, ValueError) as exc:
        record.code = record.code or type(exc).__name__
        record.message = record.message or str(exc)[:200]
    return record


async def _flood_stream(run: Run, tenant: str, max_tokens: int) -> None:
    while True:
        record = await stream_chat(run, tenant, "flood", max_tokens, run.prompt(FLOOD_PROMPT_WORDS))
        if not record.is_complete:
            await asyncio.sleep(REFUSAL_PAUSE_S)


@contextlib.asynccontextmanager
async def flooding(run: Run, tenant: str, num_streams: int, max_tokens: int) -> AsyncIterator[None]:
    """``num_streams`` streams of ``tenant`` in a closed loop (each sends its next request
    when its last one ends) for the body of the ``async with``; on leaving it, every stream
    in flight is closed."""
    tasks = [
        asyncio.create_task(_flood_stream(run, tenant, max_tokens)) for _ in range(num_streams)
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
