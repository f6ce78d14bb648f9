"""The OpenAI API on the real vLLM engine (CPU, tiny random model), through real HTTP."""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import openai
import pytest

from tests.conftest import TINY_MODEL_NAME, Server
from tests.http_helpers import sse_data, sse_json

pytestmark = pytest.mark.engine

MESSAGES = [{"role": "user", "content": "Tell me about the morning train and the fields."}]


def _oai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=server.base_url + "/v1", timeout=120)


def running_requests(server: Server) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running")
    ]
    return sum(values)


def test_openai_client_streaming_and_not(gateway_server: Server) -> None:
    client = _oai(gateway_server)
    reply = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=MESSAGES,
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 12
    assert reply.choices[0].message.content
    stream = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=MESSAGES,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    # Greedy: the stream and the non-streamed reply are the same text.
    assert text == reply.choices[0].message.content


def test_completions_logprobs_and_stop(gateway_server: Server) -> None:
    client = _oai(gateway_server)
    reply = client.completions.create(
        model=TINY_MODEL_NAME,
        prompt="The morning train left the station",
        max_tokens=5,
        temperature=0,
        logprobs=3,
        extra_body={"ignore_eos": True},
    )
    lp = reply.choices[0].logprobs
    assert lp is not None and len(lp.tokens or []) == 5
    assert all(len(top) >= 1 for top in lp.top_logprobs or [])
    chat = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=MESSAGES,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content and all(len(t.top_logprobs) == 2 for t in content)


def test_json_schema_response_format(gateway_server: Server) -> None:
    schema = {
        "type": "object",
        "properties": {"color": {"type": "string", "enum": ["red", "blue"]}},
        "required": ["color"],
        "additionalProperties": False,
    }
    reply = _oai(gateway_server).chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=MESSAGES,
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    parsed = json.loads(reply.choices[0].message.content or "")
    assert parsed["color"] in ("red", "blue")


def test_too_long_prompt_is_400(gateway_server: Server) -> None:
    long = "the fields were wet " * 3000
    with gateway_server.client() as client:
        r = client.post(
            "/v1/chat/completions",
            json={"model": TINY_MODEL_NAME, "messages": [{"role": "user", "content": long}]},
        )
    assert r.status_code == 400
    assert "context" in r.json()["error"]["message"]


def test_concurrent_streams_all_complete(gateway_server: Server) -> None:
    """Eight concurrent streams each deliver all 16 tokens.

    Tokens are counted from `token_ids` and `usage`, not from SSE events: under
    load one event may carry several tokens (the ITL metric counts those as zero
    gaps), so the number of events is not the number of tokens.
    """

    def one(i: int) -> tuple[int, int, str | None]:
        with gateway_server.client() as client:
            body = {
                "model": TINY_MODEL_NAME,
                "messages": [{"role": "user", "content": f"Story number {i} about rain."}],
                "max_tokens": 16,
                "stream": True,
                "ignore_eos": True,
                "return_token_ids": True,
                "stream_options": {"include_usage": True},
            }
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200 and sse_data(r.text)[-1] == "[DONE]"
            chunks = sse_json(r.text)
            streamed = sum(
                len(c["choices"][0].get("token_ids") or []) for c in chunks if c["choices"]
            )
            finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
            usage = [c["usage"] for c in chunks if c.get("usage")]
            assert len(usage) == 1
            return streamed, usage[0]["completion_tokens"], finish

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert all(r == (16, 16, "length") for r in results), results


def _generated_tokens(server: Server) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:generation_tokens_total")
    )


def test_disconnect_mid_stream_aborts_engine_request(gateway_server: Server) -> None:
    """Aborted, not run out: the engine stops far short of ``max_tokens`` (a small model
    may decode 2,000 tokens before a poll for "nothing running" would notice)."""
    generated = _generated_tokens(gateway_server)
    body = {
        "model": TINY_MODEL_NAME,
        "messages": MESSAGES,
        "max_tokens": 2000,
        "stream": True,
        "ignore_eos": True,
    }
    with (
        gateway_server.client() as client,
        client.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data: ")
            if seen >= 5:
                break
    deadline = time.monotonic() + 30
    while running_requests(gateway_server) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running_requests(gateway_server) == 0
    assert _generated_tokens(gateway_server) - generated < 1000
