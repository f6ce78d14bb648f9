"""The embedded SmolLM2 pinned to float32: what it knows.

NOTE: every test here asserts the model's answers, so the engine runs in float32 on every
CPU, whatever ``DLFP_DTYPE`` the environment sets. ``dtype auto`` follows the CPU
(bfloat16 with AMX, float32 on AVX2-only CPUs), and in bfloat16 the dequantized 135M
model's greedy first token tips from "The" to "L'" (no "Paris"). ``tests/test_embedded_model.py``
runs the same model in the configured dtype and asserts only what holds in any dtype.
That the controller never changes which tokens are computed is checked once, on the
shared engine (``tests/test_engine_dlfp.py``), every controller and plan included.
"""

from __future__ import annotations

import openai
import pytest

from tests.conftest import Server

pytestmark = pytest.mark.engine

MODEL = "smollm2-135m-instruct"


def capital_of_france(server: Server, **sampling: float) -> str:
    client = openai.OpenAI(api_key="unused", base_url=server.base_url + "/v1", timeout=300)
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=30,
        **sampling,  # type: ignore[arg-type]
    )
    return reply.choices[0].message.content or ""


def test_capital_of_france(smollm_f32_server: Server) -> None:
    assert "Paris" in capital_of_france(smollm_f32_server, temperature=0)


def test_the_first_call_names_paris_and_stops_by_itself(smollm_f32_server: Server) -> None:
    """The README's first call as written: no max_tokens, no sampling fields. The embedded
    model's defaults (greedy, at most 256 new tokens) answer and end with "stop"."""
    client = openai.OpenAI(api_key="unused", base_url=smollm_f32_server.base_url + "/v1")
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}]
    )
    assert "Paris" in (reply.choices[0].message.content or "")
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens < 256
