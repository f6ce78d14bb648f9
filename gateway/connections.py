"""What no client connection can take from the others: a time-out on reading a request's
head, and a listener of their own for the probes.

uvicorn closes a keep-alive connection that idles between requests, but not one that
never sends a request: 300 idle sockets held every connection uvicorn allowed, and
``/health`` answered 503 with them. Here a connection whose first request head has
not arrived ``header_timeout_s`` after it opened is closed. The probe listener answers
``GET /health`` and ``GET /ready`` alone, one request per connection, with what the
serving port's routes answer (``ServingStatus.readiness``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.serving_status import ServingStatus

MAX_PROBE_REQUEST_BYTES = 4096


def with_header_timeout(protocol: type[asyncio.Protocol], timeout_s: float) -> type[Any]:
    """uvicorn's HTTP protocol ``protocol``, closing a connection whose first request head
    is not complete ``timeout_s`` after it opened (uvicorn's ``cycle`` starts then)."""

    class HeaderTimeoutProtocol(protocol):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_timer = self.loop.call_later(timeout_s, self._close_if_no_request)

        def _close_if_no_request(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_timer.cancel()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


class ProbeProtocol(asyncio.Protocol):
    """One ``GET /health`` or ``GET /ready`` a connection, then close."""

    def __init__(self, serving: ServingStatus, timeout_s: float) -> None:
        self._serving = serving
        self._timeout_s = timeout_s
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._is_head = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._timeout_s, transport.close)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if b"\r\n\r\n" in self._buffer:
            self._answer(self._buffer.split(b"\r\n", 1)[0])
        elif len(self._buffer) > MAX_PROBE_REQUEST_BYTES:
            self._respond(431, {"status": "request head too large"})

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _answer(self, request_line: bytes) -> None:
        method, _, rest = request_line.partition(b" ")
        self._is_head = method == b"HEAD"
        path = rest.partition(b" ")[0].partition(b"?")[0]
        if method not in (b"GET", b"HEAD"):
            self._respond(405, {"status": "method not allowed"})
        elif path == b"/health":
            self._respond(200, {"status": "ok"})
        elif path == b"/ready":
            self._respond(*self._serving.readiness())
        else:
            self._respond(404, {"status": "the probe port serves /health and /ready only"})

    def _respond(self, status: int, body: dict[str, Any]) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        payload = json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n"
        )
        self._transport.write(head.encode() + (b"" if self._is_head else payload))
        self._transport.close()


_REASONS = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


async def start_probe_listener(
    serving: ServingStatus, host: str, port: int, timeout_s: float
) -> asyncio.AbstractServer:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: ProbeProtocol(serving, timeout_s), host, port)
