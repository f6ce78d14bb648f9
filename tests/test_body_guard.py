"""The event loop's work on a body is bounded by what its bytes say (quick tier, FAKE
engine): counted work, not clock time."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from gateway import protocol
from gateway.body_guard import may_hold_surrogate, num_values_at_most
from tests.http_helpers import fake_client

JSON = {"content-type": "application/json"}
CHAT: Any = {"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}


@pytest.fixture
def text_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every string the text check encodes, in order."""
    seen: list[str] = []
    real = protocol._is_unicode

    def counted(text: str) -> bool:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(protocol, "_is_unicode", counted)
    yield seen


def test_the_raw_checks() -> None:
    assert num_values_at_most(b'{"a": [1, 2, 3]}') == 1 + 1 + 1 + 2 + 1  # {, [, 2 commas, :
    nested = b"[" * 900 + b"]" * 900  # 900 values without a comma
    assert num_values_at_most(nested) > 900
    assert not may_hold_surrogate(json.dumps({"a": "é日本"}, ensure_ascii=False).encode())
    # An emoji travels as an escaped surrogate pair from ensure_ascii encoders.
    assert not may_hold_surrogate(json.dumps({"a": "é日本😀"}).encode())
    # An escaped backslash before text that looks like a pair: the walk decides.
    assert may_hold_surrogate(b'{"a": "\\\\ud800\\udc00"}')
    assert may_hold_surrogate(b'{"a": "\\ud800"}')
    assert may_hold_surrogate('{"a": "x"}'.encode("utf-16"))


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def test_the_raw_surrogate_check_agrees_with_the_parsed_text() -> None:
    """On escapes in any case and order, the raw check says a lone surrogate may be there
    exactly when the parsed string holds one."""
    pieces = ["a", "\\ud83c", "\\udf27", "\\uD83C", "\\uDF27", "\\udbff", "\\udc00", "\\u0041"]
    pieces += ["\\ud7ff", "\\ue000", "é", '\\"', "\\uDbFf"]
    rng = random.Random(20261204)
    num_lone = 0
    for _ in range(5000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 9)))
        body = f'{{"a": "{raw}"}}'.encode()
        lone = _has_lone_surrogate(json.loads(body)["a"])
        num_lone += lone
        assert may_hold_surrogate(body) == lone, raw
    assert 0 < num_lone < 5000


async def test_a_body_of_too_many_values_is_refused_before_it_is_parsed(
    text_checks: list[str],
) -> None:
    body = json.dumps(CHAT | {"metadata": [0] * 200_000})
    async with fake_client() as (client, _, engine):
        r = await client.post("/v1/chat/completions", content=body, headers=JSON)
        assert r.status_code == 400
        assert "JSON values" in r.json()["error"]["message"]
        assert engine.num_tokenized == 0 and text_checks == []


async def test_a_body_without_surrogate_escapes_is_not_walked(text_checks: list[str]) -> None:
    body = json.dumps(CHAT | {"metadata": {"tags": ["a"] * 50_000}})
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/chat/completions", content=body, headers=JSON)
        assert r.status_code == 200, r.text
        assert text_checks == []


async def test_a_walked_body_checks_its_strings_only(text_checks: list[str]) -> None:
    bad = CHAT | {"user": "\ud800", "metadata": {"n": [0] * 50_000}}
    body = json.dumps(bad)  # ensure_ascii: the surrogate travels as an escape
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/chat/completions", content=body, headers=JSON)
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "user"
        # The strings and keys of the body, not its fifty thousand numbers.
        assert len(text_checks) < 20


async def test_the_guard_applies_under_a_proxys_root_path() -> None:
    from gateway.body_guard import JSONBodyGuardMiddleware

    reached: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        body = json.dumps(CHAT | {"metadata": [0] * 200_000}).encode()
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path, root = "/gw/v1/chat/completions", "/gw"
    scope = {"type": "http", "method": "POST", "path": path, "root_path": root, "headers": []}
    await JSONBodyGuardMiddleware(app, max_values=131_072)(scope, receive, send)
    assert reached == [] and sent[0]["status"] == 400
