"""Grammar vetting: the real xgrammar compiler on the tiny model's tokenizer, in the
vetter's own worker process, and the refusal over HTTP on the FAKE engine (quick tier)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine_worker.client.grammar_check import GrammarVetter, short_message
from engine_worker.contract.api import ChatOutput, InvalidRequestError
from tests.fakes import BAD_GRAMMAR, FakeEngine
from tests.http_helpers import fake_client

TIMEOUT_S = 2.0
# 52 bytes, within every gateway bound, yet about 27 s to compile on the tiny model's
# tokenizer (2 cores): xgrammar unrolls the counted repetition.
SLOW = json.dumps({"type": "string", "pattern": "^[a-z0-9]{1,20000}$"})
TOOL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<tool_call>"],
        "tags": [
            {
                "begin": "<tool_call>",
                "content": {"type": "json_schema", "json_schema": {"type": "object"}},
                "end": "</tool_call>",
            }
        ],
    },
}
LEGACY_TAG = {
    "type": "structural_tag",
    "structures": [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}],
    "triggers": ["<f>"],
}
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _schema(name: str) -> str:
    """A distinct small schema (the vetter remembers verdicts by spec)."""
    return json.dumps({"type": "object", "properties": {name: {"type": "integer"}}})


@pytest.fixture(scope="module")
async def vetter(tiny_model_dir: Path) -> AsyncIterator[GrammarVetter]:
    checker = GrammarVetter(str(tiny_model_dir), timeout_s=TIMEOUT_S)
    yield checker
    await checker.close()


async def test_a_schema_compiles_once_and_is_remembered(vetter: GrammarVetter) -> None:
    await vetter.check("json_schema", _schema("a"))
    num_compiles = vetter.num_compiles
    await vetter.check("json_schema", _schema("a"))
    assert vetter.num_compiles == num_compiles
    await asyncio.gather(*(vetter.check("json_schema", _schema("b")) for _ in range(3)))
    assert vetter.num_compiles == num_compiles + 1
    assert vetter.num_worker_starts == 1


async def test_a_schema_xgrammar_refuses_is_refused(vetter: GrammarVetter) -> None:
    spec = json.dumps({"type": "nonsense"})
    with pytest.raises(InvalidRequestError, match='Unsupported type "nonsense"') as refused:
        await vetter.check("json_schema", spec)
    assert refused.value.param is None
    assert "json_schema_converter" not in str(refused.value)  # xgrammar's prefix is cut
    num_compiles = vetter.num_compiles
    with pytest.raises(InvalidRequestError):
        await vetter.check("json_schema", spec)
    assert vetter.num_compiles == num_compiles


async def test_structural_tags_compile_as_vllm_compiles_them(vetter: GrammarVetter) -> None:
    await vetter.check("structural_tag", json.dumps(TOOL_TAG))
    await vetter.check("structural_tag", json.dumps(LEGACY_TAG))
    bogus = {"type": "structural_tag", "format": {"type": "bogus"}}
    with pytest.raises(InvalidRequestError, match="structural tag cannot be compiled"):
        await vetter.check("structural_tag", json.dumps(bogus))
    # The same text as a schema is another spec, compiled on its own.
    with pytest.raises(InvalidRequestError, match="schema cannot be compiled"):
        await vetter.check("json_schema", json.dumps(bogus))


async def test_a_slow_schema_times_out_and_the_queue_goes_on(vetter: GrammarVetter) -> None:
    await vetter.check("json_schema", _schema("warm"))  # its worker started, whatever ran before
    num_compiles, num_starts = vetter.num_compiles, vetter.num_worker_starts
    slow = asyncio.create_task(vetter.check("json_schema", SLOW))
    queued = asyncio.create_task(vetter.check("json_schema", _schema("queued")))
    left = asyncio.create_task(vetter.check("json_schema", _schema("left")))
    for _ in range(3):
        await asyncio.sleep(0)  # all three wait for the one worker now
    left.cancel()
    with pytest.raises(InvalidRequestError, match="took too long to compile"):
        await slow
    # Queued behind the slow one for the whole time-out, yet timed from its own start.
    await queued
    with pytest.raises(asyncio.CancelledError):
        await left
    assert vetter.num_compiles == num_compiles + 2  # the one whose caller left was dropped
    assert vetter.num_worker_starts == num_starts + 1  # killed at the time-out, restarted
    with pytest.raises(InvalidRequestError, match="took too long"):
        await vetter.check("json_schema", SLOW)  # remembered: no second wait
    assert vetter.num_compiles == num_compiles + 2


async def test_a_vetter_that_cannot_start_lets_grammars_through(tmp_path: Path) -> None:
    checker = GrammarVetter(str(tmp_path / "no-model"), timeout_s=TIMEOUT_S)
    try:
        await checker.check("json_schema", json.dumps({"type": "nonsense"}))
        assert not checker.is_available
        assert checker.num_compiles == 0
    finally:
        await checker.close()
    with pytest.raises(RuntimeError, match="closed"):
        await checker.check("json_schema", _schema("a"))


def test_messages_are_one_short_line() -> None:
    exc = RuntimeError("[04:04:24] /project/cpp/x.cc:12: Check failed: (a) is false: bad\n" * 99)
    message = short_message(exc)
    assert message.startswith("bad [04:04:24]") and "\n" not in message
    assert len(message) <= 300


async def test_a_refused_response_format_is_a_400_before_submission() -> None:
    schema = {"type": "object", "description": BAD_GRAMMAR}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    async with fake_client() as (client, _, engine):
        r = await client.post("/v1/chat/completions", json=CHAT | {"response_format": fmt})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "response_format"
        assert engine.checked_grammars == [("json_schema", json.dumps(schema))]
        assert engine.submitted == []
        fine = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
        r = await client.post("/v1/chat/completions", json=CHAT | {"response_format": fine})
        assert r.status_code == 200
        assert len(engine.checked_grammars) == 2 and len(engine.submitted) == 1


async def test_a_refused_forced_tool_call_names_tools() -> None:
    engine = FakeEngine()
    engine.output = ChatOutput(constraints={"structural_tag": json.dumps({"x": BAD_GRAMMAR})})
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = CHAT | {"tools": [tool], "tool_choice": "required"}
    async with fake_client(engine) as (client, _, _):
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "tools"
        assert [kind for kind, _ in engine.checked_grammars] == ["structural_tag"]
        assert engine.submitted == []
