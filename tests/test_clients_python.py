"""Real Python client libraries, unchanged but for ``base_url`` and ``api_key``, against
the gateway on the FAKE engine (quick tier): the OpenAI Agents SDK on both its models,
LangChain's ``ChatOpenAI``, the ``openai`` SDK's parse and stream helpers, and
LlamaIndex's ``OpenAIResponses`` (installed beside the environment on first use, since
its declared bounds conflict with the project's: ``tests/llamaindex_client.py``).

The gateway is served by uvicorn on a loopback port in a thread, once for the module.
The FAKE engine's plain text never ends by itself, so requests for text pass the vLLM
extension ``stop_token_ids`` through each client's own ``extra_body`` to end it with
"stop" after the canned sentence, as a model ends its answer. Under a JSON constraint
(a structured output, or a tool named in ``tool_choice``) the fake answers with
``schema_instance``'s canned object and stops by itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel, SecretStr

from gateway.settings import Settings
from tests.fakes import WORDS, FakeEngine
from tests.http_helpers import fake_app, served_in_thread
from tests.llamaindex_client import llama_index_openai

MODEL = "fake-model"
FAKE_TEXT = "".join(WORDS)
"""The fake's answer up to its stop token: "fake token stream from the fake engine."."""
STOP_AT_PERIOD: dict[str, Any] = {"stop_token_ids": [len(WORDS) - 1]}
"""The fake's i-th token has id i: stopping at the last word's id ends on the period."""
QUESTION = "What is 1 + 1?"


class Answer(BaseModel):
    city: str
    temperature: int


CANNED_ANSWER = Answer(city="fake", temperature=1)
"""``schema_instance`` of ``Answer``'s schema: the fake's structured output."""


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


CANNED_SUM = add(1, 1)
"""``add`` on the fake's canned arguments ({"a": 1, "b": 1})."""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    # Clients send long tool schemas and system prompts; the fake counts one token a
    # character.
    engine = FakeEngine(model_name=MODEL, max_model_len=8192)
    app = fake_app(Settings(_env_file=None), engine)  # type: ignore[call-arg]
    with served_in_thread(app) as where:
        yield f"http://{where}/v1"


def async_openai(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)


def sync_openai(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)


# --- the OpenAI Agents SDK ---

AGENT_MODELS = ["responses", "chat_completions"]


def agent_model(kind: str, base_url: str) -> Any:
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel

    client = async_openai(base_url)
    if kind == "responses":
        return OpenAIResponsesModel(model=MODEL, openai_client=client)
    return OpenAIChatCompletionsModel(model=MODEL, openai_client=client)


@pytest.fixture(scope="module", autouse=True)
def _no_tracing() -> None:
    """The SDK would export traces to OpenAI's servers, which are out of reach."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


@pytest.mark.parametrize("kind", AGENT_MODELS)
async def test_agents_plain_run(base_url: str, kind: str) -> None:
    from agents import Agent, ModelSettings, Runner

    agent = Agent(
        name="assistant",
        instructions="Answer briefly.",
        model=agent_model(kind, base_url),
        model_settings=ModelSettings(extra_body=STOP_AT_PERIOD),
    )
    result = await Runner.run(agent, QUESTION)
    assert result.final_output == FAKE_TEXT


@pytest.mark.parametrize("kind", AGENT_MODELS)
async def test_agents_named_tool_round_trip(base_url: str, kind: str) -> None:
    """The forced call runs the tool; the SDK then resets ``tool_choice``, so the second
    turn answers in text with the tool's result in its input."""
    from agents import Agent, ModelSettings, Runner, function_tool
    from agents.items import ToolCallItem, ToolCallOutputItem

    agent = Agent(
        name="calculator",
        instructions="Use the tool.",
        model=agent_model(kind, base_url),
        tools=[function_tool(add)],
        model_settings=ModelSettings(tool_choice="add", extra_body=STOP_AT_PERIOD),
    )
    result = await Runner.run(agent, QUESTION, max_turns=3)
    [call] = [item for item in result.new_items if isinstance(item, ToolCallItem)]
    assert call.raw_item.name == "add"  # type: ignore[union-attr]
    assert json.loads(call.raw_item.arguments) == {"a": 1, "b": 1}  # type: ignore[union-attr]
    [output] = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert output.output == CANNED_SUM
    assert result.final_output == FAKE_TEXT
    sent_back = result.to_input_list()
    assert any(i.get("type") == "function_call_output" for i in sent_back)


@pytest.mark.parametrize("kind", AGENT_MODELS)
async def test_agents_streamed_run(base_url: str, kind: str) -> None:
    from agents import Agent, ModelSettings, Runner
    from openai.types.responses import ResponseTextDeltaEvent

    agent = Agent(
        name="assistant",
        model=agent_model(kind, base_url),
        model_settings=ModelSettings(extra_body=STOP_AT_PERIOD),
    )
    result = Runner.run_streamed(agent, QUESTION)
    deltas = [
        event.data.delta
        async for event in result.stream_events()
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)
    ]
    assert len(deltas) > 1
    assert "".join(deltas) == result.final_output == FAKE_TEXT


@pytest.mark.parametrize("kind", AGENT_MODELS)
async def test_agents_structured_output(base_url: str, kind: str) -> None:
    from agents import Agent, Runner

    agent = Agent(name="forecaster", model=agent_model(kind, base_url), output_type=Answer)
    result = await Runner.run(agent, "The weather in Paris?")
    assert result.final_output == CANNED_ANSWER


# --- LangChain ---


def chat_openai(base_url: str, **kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key=SecretStr("unused"),
        extra_body=STOP_AT_PERIOD,
        **kwargs,
    )


def test_langchain_invoke(base_url: str) -> None:
    reply = chat_openai(base_url).invoke(QUESTION)
    assert reply.content == FAKE_TEXT
    assert reply.response_metadata["finish_reason"] == "stop"


def test_langchain_stream(base_url: str) -> None:
    chunks = list(chat_openai(base_url).stream(QUESTION))
    assert len(chunks) > 1
    assert "".join(str(c.content) for c in chunks) == FAKE_TEXT


def test_langchain_named_tool_round_trip(base_url: str) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    add_tool = tool(add)
    llm = chat_openai(base_url)
    question = HumanMessage(QUESTION)
    reply = llm.bind_tools([add_tool], tool_choice="add").invoke([question])
    [call] = reply.tool_calls
    assert call["name"] == "add" and call["args"] == {"a": 1, "b": 1} and call["id"]
    result = ToolMessage(str(add_tool.invoke(call["args"])), tool_call_id=call["id"])
    assert result.content == str(CANNED_SUM)
    answer = llm.bind_tools([add_tool]).invoke([question, reply, result])
    assert answer.content == FAKE_TEXT and not answer.tool_calls


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_langchain_structured_output(base_url: str, method: str) -> None:
    llm = chat_openai(base_url).with_structured_output(Answer, method=method)
    assert llm.invoke("The weather in Paris?") == CANNED_ANSWER


def test_langchain_structured_output_json_mode(base_url: str) -> None:
    """JSON mode constrains to any object, and the fake's canned object is the empty one."""
    schema = Answer.model_json_schema()
    llm = chat_openai(base_url).with_structured_output(schema, method="json_mode")
    assert llm.invoke("The weather in Paris, in JSON?") == {}


def test_langchain_responses_api(base_url: str) -> None:
    reply = chat_openai(base_url, use_responses_api=True).invoke(QUESTION)
    assert reply.text == FAKE_TEXT


# --- the openai SDK's helpers ---


def test_openai_chat_completions_parse(base_url: str) -> None:
    completion = sync_openai(base_url).chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "The weather in Paris?"}],
        response_format=Answer,
    )
    assert completion.choices[0].message.parsed == CANNED_ANSWER


def test_openai_responses_parse(base_url: str) -> None:
    response = sync_openai(base_url).responses.parse(
        model=MODEL, input="The weather in Paris?", text_format=Answer
    )
    assert response.output_parsed == CANNED_ANSWER


def test_openai_responses_stream(base_url: str) -> None:
    with sync_openai(base_url).responses.stream(
        model=MODEL, input=QUESTION, extra_body=STOP_AT_PERIOD
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1
    assert "".join(deltas) == final.output_text == FAKE_TEXT


def test_openai_responses_stream_resumes_a_stored_response(base_url: str) -> None:
    client = sync_openai(base_url)
    first = client.responses.create(model=MODEL, input=QUESTION, extra_body=STOP_AT_PERIOD)
    with client.responses.stream(response_id=first.id, starting_after=3) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[0].sequence_number == 4
    assert events[-1].type == "response.completed"
    assert final.id == first.id and final.output_text == first.output_text == FAKE_TEXT


def test_openai_three_turns_through_previous_response_id(base_url: str) -> None:
    client = sync_openai(base_url)
    previous = None
    for turn in ("one", "two", "three"):
        reply = client.responses.create(
            model=MODEL,
            input=turn,
            previous_response_id=previous or openai.omit,
            extra_body=STOP_AT_PERIOD,
        )
        assert reply.previous_response_id == previous
        previous = reply.id
    assert client.responses.retrieve(previous).output_text == FAKE_TEXT
    client.responses.delete(previous)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(previous)


# --- LlamaIndex ---


def llamaindex_responses(base_url: str) -> Any:
    responses = llama_index_openai()
    # The model is not one of OpenAI's: the context window is given rather than looked up.
    return responses.OpenAIResponses(
        model=MODEL,
        api_base=base_url,
        api_key="unused",
        context_window=8192,
        additional_kwargs={"extra_body": STOP_AT_PERIOD},
    )


def test_llamaindex_responses_chat(base_url: str) -> None:
    llm = llamaindex_responses(base_url)
    from llama_index.core.llms import ChatMessage

    reply = llm.chat([ChatMessage(role="user", content=QUESTION)])
    assert reply.message.content == FAKE_TEXT


def test_llamaindex_responses_named_tool(base_url: str) -> None:
    llm = llamaindex_responses(base_url)
    from llama_index.core.tools import FunctionTool

    reply = llm.chat_with_tools(
        [FunctionTool.from_defaults(add)],
        user_msg=QUESTION,
        tool_choice={"type": "function", "name": "add"},
    )
    [call] = llm.get_tool_calls_from_response(reply, error_on_no_tool_call=True)
    assert call.tool_name == "add" and call.tool_kwargs == {"a": 1, "b": 1}
