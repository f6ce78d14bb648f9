"""A request that sets no length gets the model's default; an explicit one goes up to the
context (quick tier, FAKE engine)."""

from __future__ import annotations

import json
from typing import Any

from gateway.engine import _engine_args
from gateway.settings import Settings
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "fake-model", "input": "hi"}


async def _max_tokens(engine: FakeEngine, path: str, body: dict[str, Any]) -> int:
    async with fake_client(engine) as (client, _, _):
        r = await client.post(path, json=body)
        assert r.status_code == 200, r.text
        return engine.submitted[-1][2].max_tokens


async def test_no_length_takes_the_generation_configs() -> None:
    engine = FakeEngine(max_model_len=256)
    engine.info.sampling_defaults = {"max_tokens": 7}
    assert await _max_tokens(engine, "/v1/chat/completions", CHAT) == 7
    assert await _max_tokens(engine, "/v1/responses", RESPONSES) == 7


async def test_an_explicit_length_goes_past_the_default_up_to_the_context() -> None:
    engine = FakeEngine(max_model_len=256)
    engine.info.sampling_defaults = {"max_tokens": 7}
    chat = CHAT | {"max_completion_tokens": 200}
    assert await _max_tokens(engine, "/v1/chat/completions", chat) == 200
    responses = RESPONSES | {"max_output_tokens": 200}
    assert await _max_tokens(engine, "/v1/responses", responses) == 200


async def test_with_no_default_the_length_is_the_contexts_room() -> None:
    engine = FakeEngine(max_model_len=256)
    num_prompt = len("<user>hi")  # the fake renders one token a character
    assert await _max_tokens(engine, "/v1/chat/completions", CHAT) == 256 - num_prompt


def test_the_setting_overrides_the_models_default_in_vllms_generation_config() -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        default_max_tokens=64,
        engine_args={"override_generation_config": '{"temperature": 0.5}'},
    )
    override = json.loads(_engine_args(settings)["override_generation_config"])
    assert override == {"temperature": 0.5, "max_new_tokens": 64}
    assert "override_generation_config" not in _engine_args(Settings(_env_file=None))  # type: ignore[call-arg]
