"""Bearer tokens: reading them, and comparing them in constant time."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.requests import HTTPConnection


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
