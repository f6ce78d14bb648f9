"""Errors in OpenAI's body (``{"error": {"message", "type", "param", "code"}}``) and their handlers.

Routes and services raise ``APIError`` (or a domain error mapped here); one set
of exception handlers turns every failure into the OpenAI body with the right
status, so no input can reach a bare 500.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine_worker.contract.api import EngineDeadError, EngineNotReadyError, InvalidRequestError
from gateway.admission import AdmissionRejected, ClientDisconnected
from gateway.metrics import Outcome
from gateway.response_store import StoreUnavailableError

logger = logging.getLogger("dlfp.http")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


def encodable(text: str) -> str:
    """``text`` with every lone surrogate escaped (``\\ud800``): an error message may
    quote the request, and a reply that echoes unencodable text fails to render."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class APIError(Exception):
    """An error the client should see, with its HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        message, param = encodable(message), None if param is None else encodable(param)
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        detail = ErrorDetail(
            message=self.message,
            type=_TYPES.get(
                self.status, "server_error" if self.status >= 500 else "invalid_request_error"
            ),
            param=self.param,
            code=self.code,
        )
        return ErrorResponse(error=detail).model_dump()

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def engine_unavailable(message: str = "the engine is not available") -> APIError:
    return APIError(503, message, code="engine_unavailable", headers={"Retry-After": "5"})


def outcome_of(exc: BaseException) -> Outcome:
    """The ``dlfp_requests_total`` outcome of a request that ended in ``exc``."""
    if isinstance(exc, AdmissionRejected):
        return "shed"
    if isinstance(exc, ClientDisconnected | asyncio.CancelledError):
        return "aborted"
    if isinstance(exc, InvalidRequestError):
        return "client_error"
    if isinstance(exc, APIError):
        if exc.status == 429:
            return "shed"
        if exc.status == 499:
            return "aborted"
        return "server_error" if exc.status >= 500 else "client_error"
    return "server_error"


@dataclass(frozen=True)
class FirstError:
    """The first of pydantic's errors, as the error bodies and logs name it."""

    message: str
    """pydantic's message, without its "Value error, " prefix."""
    param: str | None
    """The dotted location, None at the top level."""
    type: str | None = None
    loc: tuple[str, ...] = ()
    input: Any = None


def first_error(
    errors: Sequence[Mapping[str, Any]], default: str = "invalid value", skip: str | None = None
) -> FirstError:
    """The first error of ``errors`` (pydantic's ``.errors()``); ``skip`` drops a location
    part (FastAPI's ``body``)."""
    if not errors:
        return FirstError(default, None)
    first = errors[0]
    loc = tuple(str(part) for part in first.get("loc", ()) if part != skip)
    message = str(first.get("msg", default)).removeprefix("Value error, ")
    return FirstError(message, ".".join(loc) or None, first.get("type"), loc, first.get("input"))


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    first = first_error(exc.errors(), skip="body")
    if first.type == "json_invalid":
        return "the request body is not valid JSON", None
    if first.type == "extra_forbidden":
        return f"unknown parameter {first.param!r}: this gateway does not support it", first.param
    prefix = f"{first.param}: " if first.param else ""
    return f"{prefix}{first.message}", first.param


def install_error_handlers(app: FastAPI, validation_status: int = 400) -> None:
    """OpenAI's conventions: schema violations are 400, not FastAPI's 422."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        # /admin/* is our own API: there a schema violation is 422.
        status = 422 if request.url.path.startswith("/admin/") else validation_status
        return APIError(status, message, param=param, code="invalid_value").response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        return APIError(exc.status_code, message, headers=dict(exc.headers or {})).response()

    @app.exception_handler(InvalidRequestError)
    async def _invalid(_: Request, exc: InvalidRequestError) -> JSONResponse:
        return APIError(400, str(exc), param=exc.param).response()

    @app.exception_handler(EngineDeadError)
    async def _dead(_: Request, exc: EngineDeadError) -> JSONResponse:
        return engine_unavailable(f"the engine is down: {exc}").response()

    @app.exception_handler(EngineNotReadyError)
    async def _not_ready(_: Request, exc: EngineNotReadyError) -> JSONResponse:
        return engine_unavailable(str(exc)).response()

    @app.exception_handler(AdmissionRejected)
    async def _rejected(request: Request, exc: AdmissionRejected) -> JSONResponse:
        status = 503 if exc.reason == "draining" else 429
        # A refused client is told to come back later: its connection is not kept open
        # for it meanwhile (keep-alive would hold a socket per refused client).
        headers = {"Retry-After": str(exc.retry_after_s), "Connection": "close"}
        return APIError(status, str(exc), code=exc.reason, headers=headers).response()

    @app.exception_handler(StoreUnavailableError)
    async def _store(_: Request, exc: StoreUnavailableError) -> JSONResponse:
        headers = {"Retry-After": "5"}
        return APIError(503, str(exc), code="store_unavailable", headers=headers).response()

    @app.exception_handler(ClientDisconnected)
    async def _gone(request: Request, exc: ClientDisconnected) -> JSONResponse:
        # Nobody reads this reply; 499 (nginx's "client closed request") marks it in logs.
        return APIError(499, "client closed the request", code="client_closed").response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception(
            "unhandled error", extra={"event": "unhandled_error", "path": request.url.path}
        )
        return APIError(500, "internal error", code="internal_error").response()
