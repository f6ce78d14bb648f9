"""Bearer tokens: reading them, comparing them in constant time, and the checks built on them."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Collection, Iterable

from pydantic import SecretStr
from starlette.requests import HTTPConnection

from gateway.errors import APIError


def bearer_token(request: HTTPConnection) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def key_matches(token: str | None, keys: Iterable[str]) -> bool:
    """Compares bytes: ``hmac.compare_digest`` refuses non-ASCII ``str`` with a TypeError,
    and a header may carry any byte (Starlette decodes it as Latin-1)."""
    if token is None:
        return False
    given = token.encode("utf-8", "surrogateescape")
    return any(hmac.compare_digest(given, key.encode("utf-8")) for key in keys)


def is_loopback_host(host: str) -> bool:
    """A loopback address, or the name ``localhost``."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_api_key(request: HTTPConnection, keys: Collection[str]) -> None:
    """``DLFP_API_KEYS`` protects /v1/* (the docs too with ``DLFP_PROTECT_DOCS``); none = open."""
    if keys and not key_matches(bearer_token(request), keys):
        raise APIError(
            401,
            "a valid API key is required (Authorization: Bearer ...)",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )


def check_metrics_token(request: HTTPConnection, token: SecretStr | None) -> None:
    """``DLFP_METRICS_TOKEN`` protects /metrics; unset = open."""
    if token is not None and not key_matches(bearer_token(request), [token.get_secret_value()]):
        raise APIError(
            401,
            "/metrics requires Authorization: Bearer <DLFP_METRICS_TOKEN>",
            code="invalid_metrics_token",
            headers={"WWW-Authenticate": "Bearer"},
        )


def key_digest(token: str) -> str:
    """What stands for an API key wherever it is kept or counted: never the key itself."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def client_id(request: HTTPConnection, keys: Collection[str]) -> str:
    """Who a request is charged to: its API key when keys are configured, otherwise its
    peer address."""
    token = bearer_token(request)
    if keys and token is not None:
        return f"key:{key_digest(token)}"
    return f"addr:{request.client.host if request.client else '?'}"
