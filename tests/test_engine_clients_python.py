"""Real Python client libraries against the real engine: the embedded SmolLM2's session
gateway, one plain call and one tool call forced by name per client, with 32 output
tokens at most. The clients' other paths exercise the HTTP layer, which the FAKE engine
covers in tests/test_clients_python.py. What the model says is numerics, so only its
shape is asserted.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel, SecretStr

from tests.conftest import Server
from tests.llamaindex_client import llama_index_openai
from tests.test_clients_python import add

pytestmark = pytest.mark.engine

MAX_TOKENS = 32
GREETING = "Say hello."
"""A prompt the instruct model answers in a few words, so it ends before the cap: the
Agents SDK refuses an answer cut at ``max_tokens``."""
QUESTION = "What is 2 + 3? Use the tool."


class Add(BaseModel):
    """Add two integers."""

    a: int
    b: int


def served_model(server: Server) -> str:
    return sync_openai(server).models.list().data[0].id


def sync_openai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=300)


def is_sum_call(name: str, arguments: dict[str, Any]) -> bool:
    """The named tool, with the integers its schema constrains the arguments to."""
    return name == "add" and all(isinstance(arguments.get(k), int) for k in ("a", "b"))


@pytest.fixture(scope="module")
def model(smollm_server: Server) -> str:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # traces would go to OpenAI's servers, out of reach
    return served_model(smollm_server)


def agents_model(server: Server, model: str) -> Any:
    from agents import OpenAIResponsesModel

    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused", timeout=300)
    return OpenAIResponsesModel(model=model, openai_client=client)


async def test_agents_sdk(smollm_server: Server, model: str) -> None:
    from agents import Agent, ModelSettings, Runner, function_tool

    plain = Agent(
        name="assistant",
        model=agents_model(smollm_server, model),
        model_settings=ModelSettings(temperature=0, max_tokens=MAX_TOKENS),
    )
    result = await Runner.run(plain, GREETING)
    assert isinstance(result.final_output, str) and result.final_output.strip()

    # The run stops at the tool's result: a second turn would be the model's free choice.
    calculator = Agent(
        name="calculator",
        model=agents_model(smollm_server, model),
        tools=[function_tool(add)],
        tool_use_behavior="stop_on_first_tool",
        model_settings=ModelSettings(tool_choice="add", max_tokens=MAX_TOKENS),
    )
    result = await Runner.run(calculator, QUESTION)
    [call] = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    arguments = json.loads(call.arguments)  # type: ignore[union-attr]
    assert is_sum_call(call.name, arguments)  # type: ignore[union-attr]
    assert result.final_output == str(add(**arguments))  # the SDK hands back its text


def test_langchain(smollm_server: Server, model: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=model,
        base_url=smollm_server.base_url + "/v1",
        api_key=SecretStr("unused"),
        max_completion_tokens=MAX_TOKENS,
    )
    assert llm.invoke(GREETING).text.strip()
    reply = llm.bind_tools([add], tool_choice="add").invoke(QUESTION)
    [call] = reply.tool_calls
    assert is_sum_call(call["name"], call["args"]) and call["id"]


def test_openai_sdk_helpers(smollm_server: Server, model: str) -> None:
    client = sync_openai(smollm_server)
    with client.responses.stream(
        model=model, input=GREETING, max_output_tokens=MAX_TOKENS
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
    assert "".join(deltas).strip()
    completion = client.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[openai.pydantic_function_tool(Add, name="add")],
        tool_choice={"type": "function", "function": {"name": "add"}},
        max_tokens=MAX_TOKENS,
    )
    [call] = completion.choices[0].message.tool_calls or []
    assert call.type == "function" and isinstance(call.function.parsed_arguments, Add)


def test_llamaindex(smollm_server: Server, model: str) -> None:
    responses = llama_index_openai()
    from llama_index.core.tools import FunctionTool

    llm = responses.OpenAIResponses(
        model=model,
        api_base=smollm_server.base_url + "/v1",
        api_key="unused",
        context_window=2048,
        max_output_tokens=MAX_TOKENS,
    )
    assert str(llm.complete(GREETING)).strip()
    reply = llm.chat_with_tools(
        [FunctionTool.from_defaults(add)],
        user_msg=QUESTION,
        tool_choice={"type": "function", "name": "add"},
    )
    [call] = llm.get_tool_calls_from_response(reply, error_on_no_tool_call=True)
    assert is_sum_call(call.tool_name, call.tool_kwargs)
