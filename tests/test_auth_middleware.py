"""The ASGI middleware on the FAKE engine, called as raw ASGI (quick tier): the API key is
checked before the body is read, and only a whole sane ``X-Request-Id`` is echoed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from tests.fakes import FakeEngine
from tests.http_helpers import running_app

MIB = 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Exchange:
    """One request through the app, recording what it read and what it sent."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    num_body_reads: int = 0


async def call(
    app: FastAPI,
    path: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    method: str = "POST",
) -> Exchange:
    exchange = Exchange()
    chunks = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]

    async def receive() -> dict[str, Any]:
        if exchange.num_body_reads < len(chunks):
            exchange.num_body_reads += 1
            more = exchange.num_body_reads < len(chunks)
            return {
                "type": "http.request",
                "body": chunks[exchange.num_body_reads - 1],
                "more_body": more,
            }
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            exchange.status = message["status"]
            exchange.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            exchange.body += message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("192.0.2.7", 4000),
        "server": ("testserver", 80),
    }
    await app(scope, receive, send)  # type: ignore[arg-type]
    return exchange


def _json_headers(key: str, length: int) -> list[tuple[bytes, bytes]]:
    return [
        (b"authorization", f"Bearer {key}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(length).encode()),
    ]


async def test_a_bad_key_is_refused_before_the_body_is_read() -> None:
    body = b"{" + b"x" * (MIB - 1)  # 1 MiB, the default limit, and not JSON
    async with running_app(FakeEngine(), api_keys="k1") as app:
        refused = await call(app, "/v1/chat/completions", _json_headers("nope", len(body)), body)
        admitted = await call(app, "/v1/chat/completions", _json_headers("k1", len(body)), body)
    assert refused.status == 401
    assert refused.num_body_reads == 0, "the app read the body of a request without a key"
    error = json.loads(refused.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.headers["x-request-id"]
    # The key lets the same body through, to the parser that refuses it.
    assert admitted.status == 400 and admitted.num_body_reads == len(body) // CHUNK


async def test_a_bad_key_with_a_body_over_the_limit_is_still_401() -> None:
    async with running_app(FakeEngine(), api_keys="k1", max_body_bytes=1024) as app:
        refused = await call(app, "/v1/completions", _json_headers("nope", 4096), b"x" * 4096)
        too_big = await call(app, "/v1/completions", _json_headers("k1", 4096), b"x" * 4096)
    assert refused.status == 401 and refused.num_body_reads == 0
    assert too_big.status == 413


async def test_without_keys_v1_reads_its_body_as_before() -> None:
    async with running_app(FakeEngine()) as app:
        exchange = await call(app, "/v1/completions", _json_headers("any", 2), b"{]")
    assert exchange.status == 400 and exchange.num_body_reads == 1


async def test_only_a_whole_sane_request_id_is_echoed() -> None:
    async with running_app(FakeEngine()) as app:
        for given in (b"abc\n", b"abc\r\n", b"ab c", b"", b"x" * 129):
            exchange = await call(app, "/health", [(b"x-request-id", given)], method="GET")
            echoed = exchange.headers["x-request-id"]
            assert echoed != given.decode() and len(echoed) == 32, given
        exchange = await call(app, "/health", [(b"x-request-id", b"trace-1:a.b_c")], method="GET")
        assert exchange.headers["x-request-id"] == "trace-1:a.b_c"
