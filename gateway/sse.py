"""Server-Sent Events with keep-alive comments, on FastAPI's SSE encoder.

The status of a streamed request is decided before the response starts (the
route submits to the engine first); after that, an error ends the stream with
an OpenAI error event. While no event is ready (a prompt waiting for its first
token can wait tens of seconds on a CPU), a comment line keeps proxies and
clients from timing the connection out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.sse import EventSourceResponse, format_sse_event

DONE = format_sse_event(data_str="[DONE]")


def event(payload: dict[str, Any]) -> bytes:
    return format_sse_event(data_str=json.dumps(payload, separators=(",", ":")))


async def with_keepalive(events: AsyncIterator[bytes], interval_s: float) -> AsyncIterator[bytes]:
    """Forward ``events``, inserting a comment whenever ``interval_s`` passes without one."""
    iterator = aiter(events)
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            # NOTE: asyncio.wait does not cancel on timeout; cancelling the pending
            # __anext__ would close the engine stream in the middle of a request.
            done, _ = await asyncio.wait({pending}, timeout=interval_s)
            if not done:
                yield format_sse_event(comment="keep-alive")
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


def sse_response(
    events: AsyncIterator[bytes], headers: dict[str, str], interval_s: float
) -> EventSourceResponse:
    response = EventSourceResponse(with_keepalive(events, interval_s), headers=headers)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    return response
