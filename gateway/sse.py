"""Server-Sent Events with keep-alive comments, on FastAPI's SSE encoder.

The status of a streamed request is decided before the response starts (the
lifecycle submits to the engine first); after that, an error ends the stream with
an OpenAI error event and ``[DONE]``. While no event is ready (a prompt waiting for
its first token can wait tens of seconds on a CPU), a comment line keeps proxies
and clients from timing the connection out. When ``cut`` is set (the drain
deadline), the stream stops at once with the events ``on_cut`` returns.

A client that stops reading blocks the server's socket write (uvicorn waits for its
buffer to drain, with no deadline). A write that has not completed after
``write_timeout_s``, or that is still blocked when ``cut`` is set, ends the response:
``on_stalled`` runs, then ``on_close`` frees what the stream held.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from fastapi.sse import EventSourceResponse, format_sse_event
from starlette.types import Message, Receive, Scope, Send

DONE = format_sse_event(data_str="[DONE]")
_CUT_WRITE_S = 1.0
"""After the drain deadline, how long a blocked write may still take."""


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


class ClientStalled(Exception):
    """The client stopped reading: a socket write made no progress in time."""


class _ClosingEventSource(EventSourceResponse):
    """Runs ``on_close`` when the response ends, however it ends: even when the client
    left before the body's first event, so the body's own ``finally`` never ran."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        on_close: Callable[[], Awaitable[None]],
        write_timeout_s: float,
        cut: asyncio.Event | None,
        on_stalled: Callable[[], None],
    ):
        super().__init__(content)
        self._on_close = on_close
        self._write_timeout_s = write_timeout_s
        self._cut = cut or asyncio.Event()
        self._on_stalled = on_stalled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, self._watched(send))
        except ClientStalled:
            self._on_stalled()
        finally:
            with anyio.CancelScope(shield=True):
                await self._on_close()

    def _watched(self, send: Send) -> Send:
        async def watched_send(message: Message) -> None:
            write = asyncio.ensure_future(send(message))
            cut = asyncio.ensure_future(self._cut.wait())
            try:
                await asyncio.wait(
                    {write, cut}, timeout=self._write_timeout_s, return_when=asyncio.FIRST_COMPLETED
                )
                if not write.done() and cut.done():
                    # The drain deadline: a last chance for a write already under way.
                    await asyncio.wait({write}, timeout=_CUT_WRITE_S)
            finally:
                cut.cancel()
            if not write.done():
                write.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await write
                raise ClientStalled()
            write.result()

        return watched_send


def sse_response(
    events: AsyncIterator[bytes],
    interval_s: float,
    on_close: Callable[[], Awaitable[None]],
    cut: asyncio.Event | None = None,
    on_cut: Callable[[], list[bytes]] = list,
    write_timeout_s: float = 30.0,
    on_stalled: Callable[[], None] = lambda: None,
) -> EventSourceResponse:
    response = _ClosingEventSource(
        with_keepalive(events, interval_s, cut, on_cut), on_close, write_timeout_s, cut, on_stalled
    )
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    return response
