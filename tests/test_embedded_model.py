"""The embedded SmolLM2-135M-Instruct, served for real in the configured dtype.

NOTE: this server takes ``DLFP_DTYPE`` from the environment (``auto`` when unset, which
resolves to bfloat16 on CPUs with native bf16 and float32 elsewhere), so every test here
asserts only what holds in any dtype: the dtype the engine chose, that omitted sampling
fields equal the model card's explicit ones, that a schema-constrained tool call
round-trips, the model card. What the model answers is numerics, and is asserted in
float32 in ``tests/test_embedded_float32.py``. ``DLFP_DTYPE=bfloat16`` (or ``float32``)
runs this file as the other CPU kind would.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
import pytest

from engine_worker.client.cpu_features import read_cpu_flags, reported_features, resolve_dtype
from tests.conftest import Server
from tests.engine_helpers import admin
from tests.test_engine_tools import named_round_trip

pytestmark = pytest.mark.engine

MODEL = "smollm2-135m-instruct"


def test_dtype_follows_this_cpu(smollm_server: Server) -> None:
    """``--dtype auto`` (the default): bf16 only where this CPU has native bf16."""
    flags = read_cpu_flags()
    expected = resolve_dtype(os.environ.get("DLFP_DTYPE", "auto"), "cpu", flags)
    events = [e for e in smollm_server.events() if e.get("event") == "engine_config"]
    assert [e["dtype"] for e in events] == [expected], events
    state = admin(smollm_server, "GET").json()["state"]
    assert state["dtype"] == expected
    assert state["cpu_features"] == reported_features(flags)


def test_the_models_default_sampling_is_greedy(smollm_server: Server) -> None:
    """No temperature sent: the embedded model's 0 applies, exactly as if sent.

    Seeded sampling is reproducible on one engine in any dtype, so the comparison holds
    whatever the answers say. One request at a time: batched with others, a request's
    logits may round differently.
    """
    client = openai.OpenAI(api_key="unused", base_url=smollm_server.base_url + "/v1", timeout=300)

    def answers(**sampling: float) -> list[str]:
        return [
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_tokens=16,
                seed=seed,
                **sampling,  # type: ignore[arg-type]
            )
            .choices[0]
            .message.content
            or ""
            for seed in range(4)
        ]

    defaults = answers()
    assert defaults == answers(temperature=0.0)
    assert defaults != answers(temperature=1.0, top_p=1.0)


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_round_trip(smollm_server: Server, stream: bool) -> None:
    # The schema's enum constrains the city, so the call is well-formed in any dtype.
    named_round_trip(smollm_server, MODEL, stream)


def test_model_card_root_is_the_converted_directory(smollm_server: Server) -> None:
    with smollm_server.client() as client:
        [card] = client.get("/v1/models").json()["data"]
    assert card["id"] == MODEL
    assert card["root"].endswith("smollm2-135m-instruct-v3")
    assert card["max_model_len"] > 0 and card["permission"]


def test_a_named_two_integer_call_fits_in_32_tokens(smollm_server: Server) -> None:
    """A named tool_choice constrains the output to the arguments alone, so the model spends
    no tokens on the parser's envelope or the function's name."""
    client = openai.OpenAI(api_key="unused", base_url=smollm_server.base_url + "/v1", timeout=300)
    add: Any = {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Add 2 and 3."}],
        tools=[add],
        tool_choice={"type": "function", "function": {"name": "add"}},
        max_tokens=32,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "add"  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert sorted(arguments) == ["a", "b"]
    assert all(isinstance(value, int) for value in arguments.values())
