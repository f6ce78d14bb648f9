"""Bearer tokens: reading them, comparing them in constant time, and the checks built on
them; and which clients count as local to this host."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from pydantic import SecretStr
from starlette.requests import HTTPConnection

from gateway.errors import APIError

if TYPE_CHECKING:
    from gateway.settings import IPNetwork


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


LOOPBACK_CLIENTS = frozenset({ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")})
"""The client addresses that are this host itself (``::ffff:127.0.0.1`` is 127.0.0.1)."""


def is_loopback_host(host: str) -> bool:
    """A listening address that only this host reaches: any of 127.0.0.0/8 or ::1, or the
    name ``localhost``."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def is_local_client(host: str, trusted: Iterable[IPNetwork] = ()) -> bool:
    """A client /admin answers without a token: 127.0.0.1 or ::1 (or the name
    ``localhost``), or an address in ``trusted`` (``DLFP_TRUSTED_PROXIES``).

    NOTE: not the rest of 127.0.0.0/8. A service-mesh sidecar relays remote clients from
    another loopback address (Istio's from 127.0.0.6), so those count only when trusted.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    candidates = [address] if mapped is None else [address, mapped]
    networks = list(trusted)
    return any(a in LOOPBACK_CLIENTS or any(a in n for n in networks) for a in candidates)


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
