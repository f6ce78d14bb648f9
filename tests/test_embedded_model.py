"""The embedded SmolLM2-135M-Instruct, served for real, answers a simple factual question."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from engine_worker.cpu_features import has_native_bf16, read_cpu_flags, reported_features
from tests.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def smollm_server() -> Iterator[Server]:
    server = start_server("smollm2-gateway", {"DLFP_DEVICE": "cpu", "DLFP_KV_CACHE_GIB": "1"})
    yield server
    assert stop_server(server) == 0, server.log()[-3000:]


def test_capital_of_france(smollm_server: Server) -> None:
    client = openai.OpenAI(api_key="unused", base_url=smollm_server.base_url + "/v1", timeout=300)
    models = [m.id for m in client.models.list()]
    assert models == ["smollm2-135m-instruct"]
    reply = client.chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=20,
        temperature=0,
    )
    assert "Paris" in (reply.choices[0].message.content or "")


def test_dtype_follows_this_cpu(smollm_server: Server) -> None:
    """``--dtype auto`` (the default): bf16 only where this CPU has native bf16."""
    flags = read_cpu_flags()
    expected = "bfloat16" if has_native_bf16(flags) else "float32"
    events = [
        json.loads(line) for line in smollm_server.log().splitlines() if "engine_config" in line
    ]
    assert [e["dtype"] for e in events] == [expected], events
    state = httpx.get(smollm_server.base_url + "/admin/dlfp", timeout=60).json()["state"]
    assert state["dtype"] == expected
    assert state["cpu_features"] == reported_features(flags)
