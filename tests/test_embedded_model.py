"""The embedded SmolLM2-135M-Instruct, served for real, answers a simple factual question."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

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
