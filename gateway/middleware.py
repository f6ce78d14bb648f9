"""ASGI middleware: request ids and the access log, the key checks made before the body
is read, and the request body size limit."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Collection, Iterable
from typing import Any

from pydantic import SecretStr
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth import check_api_key, check_metrics_token
from gateway.errors import APIError
from gateway.logs import request_id_var

logger = logging.getLogger("dlfp.http")

_VALID_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


class RequestContextMiddleware:
    """Gives every request an id (the client's ``X-Request-Id`` if sane), echoes it,
    stamps its arrival and logs one access line when it ends. The id is only echoed
    and logged: the engine request and the completion get ids of their own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrival = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _VALID_ID.fullmatch(given) else uuid.uuid4().hex
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
            _log_access(scope, status, arrival)
            request_id_var.reset(token)


def _log_access(scope: Scope, status: int, arrival: float) -> None:
    path = scope.get("path", "")
    if path in ("/metrics", "/health", "/ready") or path.startswith("/dashboard"):
        return
    logger.info(
        "http request",
        extra={
            "event": "http_request",
            "method": scope.get("method"),
            "path": path,
            "status": status,
            "duration_s": round(time.perf_counter() - arrival, 4),
        },
    )


class AccessMiddleware:
    """The key checks that need only the path and the headers, made before the app reads
    the body, so an unauthenticated client costs neither a body read nor a JSON parse:
    /v1/* needs an API key, /metrics the scrape token, and each of ``protected`` (a path
    and what lies under it; the docs and the dashboard with ``DLFP_PROTECT_DOCS``) an API
    key. A refusal is the OpenAI error body, as the route's own check would give."""

    def __init__(
        self,
        app: ASGIApp,
        api_keys: Collection[str],
        metrics_token: SecretStr | None,
        protected: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.api_keys = frozenset(api_keys)
        self.metrics_token = metrics_token
        self.keyed = ("/v1", *protected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self._check(scope)
            except APIError as exc:
                await exc.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _check(self, scope: Scope) -> None:
        path = route_path(scope)
        if any(path == root or path.startswith(root + "/") for root in self.keyed):
            check_api_key(HTTPConnection(scope), self.api_keys)
        elif path == "/metrics":
            check_metrics_token(HTTPConnection(scope), self.metrics_token)


def route_path(scope: Scope) -> str:
    """The path the router matches: without the ``root_path`` a proxy mounts it under."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


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
