"""Bounded event-loop work for any JSON body: checks made on the raw bytes, at C speed.

A body within the size cap can still be costly to walk in Python: a list of half a
million zeros took 0.64 s of the event loop in the per-value text check alone. So,
before FastAPI parses a ``/v1`` body:

- the number of JSON values is bounded from the bytes (a comma per value, at most), so
  that parsing and validating are bounded too; past ``max_values`` the body is a 400;
- lone surrogates can enter a parsed body only through a ``\\uD800``-``\\uDFFF`` escape or
  through bytes that decode to one (``json.loads`` decodes with ``surrogatepass``): a
  body with neither is marked as checked, and ``protocol.check_text`` skips its walk.
  Only a body that holds such an escape, or is not UTF-8, is walked value by value.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import APIError
from gateway.middleware import route_path
from gateway.protocol import text_checked

_CESU_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
"""A surrogate encoded in (CESU) UTF-8. A pattern with a literal first byte, which
``re`` scans for quickly; an alternation here cost 8 ms per MiB of body."""
_BYTE_ORDER_MARK = b"\xef\xbb\xbf"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_HIGH_ESCAPE = re.compile(rb"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])")
"""In the lowered body: a high surrogate escape not followed by a low one."""
_LONE_LOW_ESCAPE_REVERSED = re.compile(rb"du\\(?<=[c-f]du\\)(?![0-9a-f]{2}[89ab]du\\)")
"""In the lowered body reversed: a low surrogate escape not after a high one. Both
patterns begin with a literal, which ``re`` scans for quickly (a lookbehind at every
escape cost 27 ms on a MiB of escaped emoji; these cost 10 ms)."""


def num_values_at_most(body: bytes) -> int:
    """An upper bound on the JSON values and keys in ``body``: apart from the whole body,
    each follows a ``[``, ``{``, ``,`` or ``:``, and one of these inside a string only makes
    the bound looser. (Commas alone miss nesting: ``[[[...]]]`` has values and none.)"""
    return 1 + sum(body.count(mark) for mark in (b"[", b"{", b",", b":"))


def may_hold_surrogate(body: bytes) -> bool:
    """False only if no string of the parsed body can hold a lone surrogate. Escaped pairs
    (an emoji, as ``ensure_ascii`` encoders write it) are fine; an escaped backslash could
    make text look like a pair, so with one the walk decides."""
    if b"\x00" in body or body.startswith(_BYTE_ORDER_MARK) or _CESU_SURROGATE.search(body):
        return True  # a surrogate in UTF-8, or a body that may be UTF-16 or UTF-32
    if not _SURROGATE_ESCAPE.search(body):
        return False
    if b"\\\\" in body:
        return True
    lowered = body.lower()
    return bool(
        _LONE_HIGH_ESCAPE.search(lowered) or _LONE_LOW_ESCAPE_REVERSED.search(lowered[::-1])
    )


class JSONBodyGuardMiddleware:
    """Reads a ``POST /v1/*`` body whole (the size limit runs first), refuses one with more
    than ``max_values`` JSON values, and marks one that cannot hold a lone surrogate;
    the app then receives the same bytes."""

    def __init__(self, app: ASGIApp, max_values: int) -> None:
        self.app = app
        self.max_values = max_values

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        is_v1_post = scope["type"] == "http" and scope.get("method") == "POST"
        if not is_v1_post or not route_path(scope).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: let the app see it
                await self.app(scope, _replay(message, receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if num_values_at_most(body) > self.max_values:
            refused = APIError(
                400,
                f"the body holds more than {self.max_values} JSON values (DLFP_MAX_BODY_VALUES)",
                code="invalid_value",
            )
            await refused.response()(scope, receive, send)
            return
        token = text_checked.set(not may_hold_surrogate(body))
        try:
            last: Message = {"type": "http.request", "body": body, "more_body": False}
            await self.app(scope, _replay(last, receive), send)
        finally:
            text_checked.reset(token)


def _replay(last: Message, receive: Receive) -> Receive:
    """``receive`` that gives ``last`` once, then the client's later messages."""
    pending = [last]

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
