"""A non-streamed reply built off the event loop, and a too-long prompt refused after a
prefix of it (quick tier: the FAKE engine, and the tiny model's real tokenizer)."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

from engine_worker.client.prompt_prefix import (
    CHARS_PER_TOKEN,
    SLACK_TOKENS,
    class_bound,
    cut_before_space,
    encode_within,
)
from engine_worker.contract.api import (
    ChatOutput,
    ChoiceDelta,
    ParsedOutput,
    PromptTooLongError,
    TokenLogprob,
    ToolCallDelta,
)
from gateway.lifecycle import _reply_response
from gateway.openai_format import ChatFormatter, CompletionFormatter, Formatter
from gateway.protocol import ChatCompletionRequest, CompletionRequest, ResponsesRequest, Usage
from gateway.responses import ResponsesInput
from gateway.routes.openai import router
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMETERS}


class _Parser:
    """Reads every output as thinking, an answer and one call to get_weather."""

    def __init__(self, on_parse: Callable[[], None] = lambda: None) -> None:
        self._on_parse = on_parse

    def parse(self, text: str, token_ids: list[int]) -> ParsedOutput:
        self._on_parse()
        call = ToolCallDelta(0, "call-1", "get_weather", '{"city": "Zürich 🌧"}')
        return ParsedOutput(content="Voilà", reasoning="Il pleut.", tool_calls=[call])

    def parse_delta(self, text: str, token_ids: list[int], finished: bool) -> ParsedOutput | None:
        return None


def _deltas(n: int) -> list[list[ChoiceDelta]]:
    """Tokens with logprobs as the engine gives them: non-ASCII text, tiny and -inf values."""
    values = [-0.5, -1e-05, -123.456789, float("-inf")]
    top = tuple((t, v) for t, v in zip([" é", "🌧", "\u00a0", '"q"'], values, strict=True))
    return [
        [
            ChoiceDelta(i, text, [k], [TokenLogprob(text, values[k % 4], top)])
            for k, text in enumerate([" Grüß", " 🌧", '"x"', "\\n"])
        ]
        + [ChoiceDelta(i, "", [], None, "stop")]
        for i in range(n)
    ]


def _formatters() -> dict[str, Formatter]:
    chat = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [TOOL],
            "logprobs": True,
            "top_logprobs": 4,
            "n": 2,
        }
    )
    completion = CompletionRequest.model_validate(
        {"model": "m", "prompt": "Weather?", "logprobs": 4, "n": 2}
    )
    responses = ResponsesInput(
        ResponsesRequest.model_validate(
            {"model": "m", "input": "Weather?", "tools": [RESPONSES_TOOL]}
            | {"temperature": 1e-05, "top_p": 0.3, "instructions": "Réponds."}
        )
    )
    responses.output = ChatOutput(new_parser=_Parser)
    return {
        "/v1/chat/completions": ChatFormatter(chat, "chatcmpl-1", "m", _Parser),
        "/v1/completions": CompletionFormatter(completion, "cmpl-1", "m"),
        "/v1/responses": responses.formatter("resp-1", "m"),
    }


def _declared_like(path: str, reply: BaseModel, response: Response) -> FastAPI:
    """An app whose routes carry the real route's ``response_model``: ``/old`` returns
    the model (as the route did), ``/new`` the ready response."""
    [route] = [r for r in router.routes if isinstance(r, APIRoute) and r.path == path]
    app = FastAPI()

    @app.post("/old", response_model=route.response_model)
    async def old() -> BaseModel:
        return reply

    @app.post("/new", response_model=route.response_model)
    async def new() -> Response:
        return response

    return app


@pytest.mark.parametrize("path", list(_formatters()))
async def test_reply_bytes_are_fastapis_own(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = _formatters()[path]
    deltas = _deltas(fmt.n)
    total = Usage.of(7, 10)
    reply = fmt.reply(deltas, total)  # once: a Response carries fresh item ids
    monkeypatch.setattr(fmt, "reply", lambda *_: reply)
    response = _reply_response(fmt, deltas, total, threading.Lock())
    app = _declared_like(path, reply, response)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        old, new = await client.post("/old"), await client.post("/new")
    assert old.status_code == new.status_code == 200
    assert new.content == old.content == response.body
    assert new.headers["content-type"] == old.headers["content-type"] == "application/json"
    body = old.json()
    if path != "/v1/completions":
        assert "get_weather" in old.text and "Zürich 🌧" in old.text
    if path != "/v1/responses":
        assert body["choices"][1]["logprobs"] is not None and "🌧" in old.text


CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def test_a_reply_is_built_in_a_worker_thread_under_the_tokenizer_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = FakeEngine()
    seen: list[tuple[threading.Thread, bool]] = []

    def record() -> None:
        seen.append((threading.current_thread(), engine.tokenizer_lock.locked()))

    engine.output = ChatOutput(new_parser=lambda: _Parser(record))
    original = CompletionFormatter.reply

    def reply(self: CompletionFormatter, *args: Any) -> Any:
        record()
        return original(self, *args)

    monkeypatch.setattr(CompletionFormatter, "reply", reply)
    async with fake_client(engine) as (client, _, _):
        r = await client.post("/v1/chat/completions", json=CHAT | {"tools": [TOOL]})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["tool_calls"]
        r = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "hi"})
        assert r.status_code == 200
    loop_thread = threading.current_thread()
    [(parsing, locked), (completing, locked_without_parsers)] = seen
    assert parsing is not loop_thread and completing is not loop_thread
    assert locked  # the parsers may use the tokenizer
    assert not locked_without_parsers  # nothing to guard: other prompts tokenize meanwhile


async def test_streams_progress_while_a_reply_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()
    original = CompletionFormatter.reply
    events: list[str] = []

    def slow_reply(self: CompletionFormatter, *args: Any) -> Any:
        started.set()
        release.wait(10)  # on the event loop, this would stop the stream below
        events.append("reply built")
        return original(self, *args)

    monkeypatch.setattr(CompletionFormatter, "reply", slow_reply)
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 8}
    async with fake_client(FakeEngine(delay_s=0.001)) as (client, _, _):
        replied = asyncio.ensure_future(client.post("/v1/completions", json=body))
        assert await asyncio.to_thread(started.wait, 10)
        streamed = await client.post("/v1/completions", json=body | {"stream": True})
        events.append("stream done")
        release.set()
        r = await replied
    assert r.status_code == 200 and r.json()["choices"][0]["text"]
    assert len([c for c in sse_json(streamed.text) if c["choices"]]) == 8
    assert events == ["stream done", "reply built"]


# --- the early size refusal ---

FIRST_PREFIX_CHARS = (256 - 1 + SLACK_TOKENS) * CHARS_PER_TOKEN


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
async def test_a_900kb_prompt_is_refused_after_a_bounded_prefix(endpoint: str) -> None:
    engine = FakeEngine(max_model_len=256)  # one token a character, no max_token_bytes
    text = "word " * 180_000
    body: dict[str, Any] = {"model": "fake-model", "max_tokens": 4}
    if endpoint == "/v1/completions":
        body["prompt"] = text
    else:
        body["messages"] = [{"role": "user", "content": text}]
    async with fake_client(engine) as (client, _, _):
        r = await client.post(endpoint, json=body)
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded", r.text
    assert "at least" in error["message"] and error["param"] in ("prompt", "messages")
    assert engine.encoded_lengths and max(engine.encoded_lengths) <= FIRST_PREFIX_CHARS
    assert not engine.submitted


async def test_a_prompt_that_fits_is_served_and_tokenized_once() -> None:
    engine = FakeEngine(max_model_len=256)
    prompt = "word " * 50
    async with fake_client(engine) as (client, _, _):
        r = await client.post(
            "/v1/completions", json={"model": "fake-model", "prompt": prompt, "max_tokens": 4}
        )
    assert r.status_code == 200, r.text
    assert engine.encoded_lengths == [len(prompt)]
    assert r.json()["usage"]["prompt_tokens"] == len(prompt)


def test_a_prefix_that_proves_nothing_leaves_the_text_tokenized_whole() -> None:
    lengths: list[int] = []

    def dense(text: str) -> list[int]:  # one token a 20-character word
        lengths.append(len(text))
        return list(range(len(text.split())))

    text = " ".join(["x" * 19] * 1000)  # 20,000 characters, 1,000 tokens
    assert len(encode_within(text, 1000, dense)) == 1000
    assert lengths[-1] == len(text) and all(n < len(text) for n in lengths[:-1])
    lengths.clear()
    with pytest.raises(PromptTooLongError) as refused:
        encode_within(text, 100, dense)  # the second prefix, four times the first, proves it
    assert 100 < refused.value.num_tokens_at_least <= 1000
    assert len(lengths) == 2 and lengths[1] <= 4 * (100 + SLACK_TOKENS) * CHARS_PER_TOKEN


def test_cut_before_space_ends_a_word() -> None:
    assert cut_before_space("ab  cd ef", 8) == 6  # "ab  cd", before " ef"
    assert cut_before_space("ab  cd", 3) == 2
    assert cut_before_space(" \n  abc", 6) == 0
    assert cut_before_space("中文没有空格", 3) == 0


_PIECES = [
    "the", "weather", "in", "Paris", "is", "sunny", "Grüße", "中文", "🌧", "42", "3.14",
    "don't", "<|im_start|>", "'s", "!!", "?", "—", "def", "f(x):", "\t", "\n", "\n\n", "  ",
    " ", " ", " ", " ",
]  # fmt: skip


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randrange(20, 400)))


def test_a_prefix_never_has_more_tokens_than_the_whole_text(tiny_model_dir: Path) -> None:
    """On a real byte-level BPE, a prefix cut before a space has exactly the whole
    text's first tokens (so well within the slack); a cut inside a word does not."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    rng = random.Random(20240607)
    num_cuts = num_mid_word_differ = num_refused = 0
    for _ in range(300):
        text = _random_text(rng)
        for special in (True, False):
            whole = tokenizer.encode(text, add_special_tokens=special)
            cut = cut_before_space(text, rng.randrange(1, len(text)))
            if cut > 0:
                num_cuts += 1
                prefix = tokenizer.encode(text[:cut], add_special_tokens=special)
                assert len(prefix) <= len(whole) + SLACK_TOKENS
                assert whole[: len(prefix)] == prefix, (text, cut)
            inside = rng.randrange(1, len(text))
            prefix = tokenizer.encode(text[:inside], add_special_tokens=special)
            num_mid_word_differ += whole[: len(prefix)] != prefix
        # What the gateway relies on: a text is refused only if it has more tokens.
        max_tokens = rng.randrange(0, len(text) // CHARS_PER_TOKEN)
        try:
            assert encode_within(text, max_tokens, tokenizer.encode) == whole
        except PromptTooLongError as exc:
            num_refused += 1
            assert max_tokens < exc.num_tokens_at_least <= len(whole)
    assert num_cuts > 300 and num_mid_word_differ > 0 and num_refused > 0


def test_the_class_bound_counts_bytes_of_a_class_per_token() -> None:
    bound = class_bound([b"abc", b"12", "中".encode(), b"#" * 80])
    assert bound("") == 0
    assert bound("abcd") == 2  # four letters, at most three a token
    assert bound("1234567") == 4  # digits, at most two a token
    assert bound("中文字") == 3  # nine non-ASCII bytes, at most three a token
    assert bound("#" * 800) == 0  # punctuation is not counted


def test_a_one_piece_text_is_refused_by_its_bound_before_any_tokenizing(
    tiny_model_dir: Path,
) -> None:
    """On a real byte-level BPE the bound never exceeds the tokens; a run of letters, one
    piece that no prefix can cut, is refused without tokenizing anything."""
    from transformers import AutoTokenizer

    from engine_worker.client.templating import token_bound

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    bound = token_bound(tokenizer)
    rng = random.Random(20261204)
    texts = [_random_text(rng) for _ in range(200)]
    texts += ["字" * 5000, "a" * 5000, "東京、大阪。" * 500, "1234567890" * 300]
    assert all(bound(t) <= len(tokenizer.encode(t, add_special_tokens=False)) for t in texts)

    encoded: list[int] = []

    def encode(text: str) -> list[int]:
        encoded.append(len(text))
        return list(tokenizer.encode(text, add_special_tokens=False))

    with pytest.raises(PromptTooLongError) as refused:
        encode_within("字" * 100_000, 4095, encode, bound=bound)
    assert refused.value.num_tokens_at_least > 4095
    assert encoded == []
