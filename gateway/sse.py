"""Server-Sent Events with keep-alive comments, on FastAPI's SSE encoder.

The status of a streamed request is decided before the response starts (the
lifecycle submits to the engine first); after that, an error ends the stream with
an OpenAI error event and ``[DONE]``. While no event is ready (a prompt waiting for
its first token can wait tens of seconds on a CPU), a comment line keeps proxies
and clients from timing the connection out. When ``cut`` is set (the drain
deadline), the stream stops at once with the events ``on_cut`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from fastapi.sse import EventSourceResponse, format_sse_event
from starlette.types import Receive, Scope, Send

DONE = format_sse_event(data_str="[DONE]")


def event(payload: dict[str, Any]) -> bytes:
    return format_sse_event(data_str=json.dumps(payload, separators=(",", ":")))


async def with_keepalive(
    events: AsyncIterator[bytes],
    interval_s: float,
    cut: asyncio.Event | None = None,
    on_cut: Callable[[], list[bytes]] = list,
) -> AsyncIterator[bytes]:
    """Forward ``events``, inserting a comment whenever ``interval_s`` passes without one."""
    iterator = aiter(events)
    pending: asyncio.Future[bytes] | None = None
    cut_waiter = asyncio.ensure_future((cut or asyncio.Event()).wait())
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            # NOTE: asyncio.wait does not cancel on timeout; cancelling the pending
            # __anext__ would close the engine stream in the middle of a request.
            waiters: set[asyncio.Future[Any]] = {pending, cut_waiter}
            done, _ = await asyncio.wait(
                waiters, timeout=interval_s, return_when=asyncio.FIRST_COMPLETED
            )
            if cut_waiter in done and pending not in done:
                await _cancel(pending)
                pending = None
                for item in on_cut():
                    yield item
                return
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
        cut_waiter.cancel()
        if pending is not None:
            await _cancel(pending)
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


async def _cancel(pending: asyncio.Future[bytes]) -> None:
    """Cancel a pending ``__anext__``: the generator's ``finally`` runs its cleanup."""
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
        await pending


class _ClosingEventSource(EventSourceResponse):
    """Runs ``on_close`` when the response ends, however it ends: even when the client
    left before the body's first event, so the body's own ``finally`` never ran."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]]):
        super().__init__(content)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._on_close()


def sse_response(
    events: AsyncIterator[bytes],
    interval_s: float,
    on_close: Callable[[], Awaitable[None]],
    cut: asyncio.Event | None = None,
    on_cut: Callable[[], list[bytes]] = list,
) -> EventSourceResponse:
    response = _ClosingEventSource(with_keepalive(events, interval_s, cut, on_cut), on_close)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    return response
