"""ASGI middleware: request ids and outcomes, and the request body size limit."""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

import anyio
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import APIError
from gateway.logs import request_id_var
from gateway.metrics import GatewayMetrics

logger = logging.getLogger("dlfp.http")

_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


def _outcome(status: int) -> str:
    if status < 400:
        return "ok"
    if status == 429:
        return "shed"
    if status == 499:
        return "aborted"
    if status >= 500:
        return "server_error"
    return "client_error"


class RequestContextMiddleware:
    """Gives every request an id (the client's ``X-Request-Id`` if sane), echoes it,
    stamps its arrival, counts its outcome and logs one line when it ends."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrival = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _VALID_ID.match(given) else uuid.uuid4().hex
        state: dict[str, Any] = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["arrival_s"] = arrival
        token = request_id_var.set(request_id)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                raw = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"
                ]
                message["headers"] = [*raw, (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            generation = state.get("generation")
            if generation is not None:
                # NOTE: the safety net for a stream whose body never ran (the client
                # left before the first event): close() is idempotent and aborts the
                # engine request and frees the slot. Shielded: we may be cancelled.
                with anyio.CancelScope(shield=True):
                    await generation.close()
            self._record(scope, state, status, arrival)
            request_id_var.reset(token)

    def _record(self, scope: Scope, state: dict[str, Any], status: int, arrival: float) -> None:
        path = scope.get("path", "")
        generation = state.get("generation")
        outcome = (
            generation.outcome if generation is not None and status < 400 else _outcome(status)
        )
        if state.get("shed"):
            outcome = "shed"
        endpoint = _ENDPOINTS.get(path)
        if endpoint is not None:
            self.metrics.requests.labels(endpoint=endpoint, outcome=outcome).inc()
        if path not in ("/metrics", "/health", "/ready") and not path.startswith("/dashboard"):
            logger.info(
                "http request",
                extra={
                    "event": "http_request",
                    "method": scope.get("method"),
                    "path": path,
                    "status": status,
                    "outcome": outcome,
                    "duration_s": round(time.perf_counter() - arrival, 4),
                },
            )


class BodySizeLimitMiddleware:
    """413 for a body over ``max_bytes``, by its Content-Length or as it streams in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = APIError(
            413, f"the request body exceeds {self.max_bytes} bytes", code="request_too_large"
        )
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await too_large.response()(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge()
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            await too_large.response()(scope, receive, send)


class _BodyTooLarge(StarletteHTTPException):
    # An HTTPException, so FastAPI's body parser re-raises it instead of calling it a 400.
    def __init__(self) -> None:
        super().__init__(413, "the request body is too large")
