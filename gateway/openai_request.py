"""OpenAI requests in, engine inputs out: the prompt's token ids and the sampling options.

``ChatInput`` and ``CompletionInput`` differ only in how the prompt is read and in
their defaults; the checks and the option mapping are shared. ``prompt_ids`` is
slow on a big body (templating, tokenizing): the lifecycle runs it off the event loop.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from engine_worker.contract.api import ChatOutput, Engine, PromptTooLongError, SamplingOptions
from gateway.errors import APIError
from gateway.named_call import named_call_output
from gateway.openai_format import ChatFormatter, CompletionFormatter, Formatter
from gateway.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    NamedToolChoice,
    ResponseFormat,
)

NEUTRAL_SAMPLING: dict[str, float] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
"""vLLM's defaults, for a field neither the request nor the model's generation config sets."""
_MODEL_DEFAULTED = ("top_k", "min_p", "repetition_penalty")

# NOTE: the proof that a prompt is too long from its size alone assumes no token
# covers more bytes than the vocabulary's longest entry; the factor 2 leaves room
# for a normalizer that shortens text (NFC composition at most halves it).
_NORMALIZATION_SLACK = 2


def _response_format(fmt: ResponseFormat | None) -> dict[str, Any]:
    if fmt is None or fmt.type == "text":
        return {}
    if fmt.type == "json_object":
        return {"json_object": True}
    if fmt.json_schema is None:  # ResponseFormat's validator forbids it
        raise APIError(400, "response_format.json_schema is required", param="response_format")
    return {"json_schema": fmt.json_schema.schema_}


def context_exceeded(
    num_prompt: int, max_model_len: int, param: str, at_least: bool = False
) -> APIError:
    size = f"at least {num_prompt}" if at_least else str(num_prompt)
    return APIError(
        400,
        f"the prompt is {size} tokens, longer than this model's context of {max_model_len} tokens",
        param=param,
        code="context_length_exceeded",
    )


def _max_tokens(
    requested: int | None, num_prompt: int, max_model_len: int, limit: int, prompt_param: str
) -> int:
    if num_prompt == 0:
        raise APIError(400, "the prompt is empty", param=prompt_param)
    room = max_model_len - num_prompt
    if room <= 0:
        raise context_exceeded(num_prompt, max_model_len, prompt_param)
    if requested is None:
        return min(room, limit)
    if requested > limit:
        raise APIError(
            400, f"max_tokens={requested} exceeds the limit of {limit}", param="max_tokens"
        )
    if requested > room:
        raise APIError(
            400,
            f"this model's context is {max_model_len} tokens; the prompt takes {num_prompt} "
            f"and max_tokens asks for {requested} more",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return requested


def sampling_values(body: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """Each sampling field: the request's value, else the model's default (vLLM's
    ``--generation-config auto``), else vLLM's neutral value (None = the engine's)."""
    out: dict[str, Any] = {}
    for name, neutral in [*NEUTRAL_SAMPLING.items(), *((n, None) for n in _MODEL_DEFAULTED)]:
        value = getattr(body, name)
        out[name] = value if value is not None else defaults.get(name, neutral)
    return out


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    if not bias:
        return None
    try:
        return {int(token): float(value) for token, value in bias.items()}
    except ValueError:
        raise APIError(400, "logit_bias keys must be token ids", param="logit_bias") from None


def _output_fields(body: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
    """vLLM's output extensions, as ``SamplingOptions`` fields."""
    allowed = body.allowed_token_ids
    return {
        "min_tokens": body.min_tokens,
        "stop_token_ids": tuple(body.stop_token_ids or ()),
        "include_stop_str_in_output": body.include_stop_str_in_output,
        "skip_special_tokens": body.skip_special_tokens,
        "spaces_between_special_tokens": body.spaces_between_special_tokens,
        "bad_words": tuple(body.bad_words or ()),
        "allowed_token_ids": None if allowed is None else tuple(allowed),
        "watermarking": body.watermarking,
        "ttft_slo_ms": body.ttft_slo_ms,
        "itl_slo_ms": body.itl_slo_ms,
    }


def _strict(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    return tool | {"function": function | {"strict": function.get("strict", True)}}


def schema_depth(schema: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0), a level at a time, without
    recursion; only containers are kept from one level to the next (a list of 131,072
    numbers takes some 15 ms)."""
    depth, level = 0, [schema] if isinstance(schema, dict | list) else []
    while any(level):  # some container of this level holds a value
        depth += 1
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
    return depth


def check_schema(schema: Any, param: str, max_depth: int, max_bytes: int) -> None:
    """Structured outputs cost a grammar compile: bound what one schema may ask for."""
    if schema_depth(schema) > max_depth:
        raise APIError(400, f"the schema nests deeper than {max_depth} levels", param=param)
    size = len(json.dumps(schema, separators=(",", ":")).encode())
    if size > max_bytes:
        raise APIError(400, f"the schema is {size} bytes, over {max_bytes}", param=param)


BodyT = TypeVar("BodyT", ChatCompletionRequest, CompletionRequest)


class _Input(Generic[BodyT]):
    """What the two endpoints share: checks and the option mapping."""

    endpoint: str
    id_prefix: str
    prompt_param = "prompt"
    body: BodyT

    def check(self, engine: Engine) -> None:
        """The cheap checks, before anything is tokenized."""
        name = self.body.model
        if name != engine.info.model_name:
            raise APIError(
                404,
                f"the model '{name}' does not exist; this gateway serves "
                f"'{engine.info.model_name}'",
                param="model",
                code="model_not_found",
            )

    def check_limits(self, max_tools: int, max_depth: int, max_bytes: int) -> None:
        """The structured-output bounds (settings ``max_tools``, ``max_schema_*``)."""
        tools = getattr(self.body, "tools", None) or []
        if len(tools) > max_tools:
            raise APIError(400, f"at most {max_tools} tools are allowed", param="tools")
        for param, schema in self.schemas():
            check_schema(schema, param, max_depth, max_bytes)

    def schemas(self) -> list[tuple[str, Any]]:
        """Each JSON schema of the body, with the ``param`` that names it."""
        tools = getattr(self.body, "tools", None) or []
        found = [
            (f"tools.{i}.function.parameters", tool.function.parameters)
            for i, tool in enumerate(tools)
            if tool.function.parameters is not None
        ]
        fmt = self.body.response_format
        if fmt is not None and fmt.json_schema is not None:
            found.append(("response_format.json_schema.schema", fmt.json_schema.schema_))
        return found

    def check_size(self, engine: Engine) -> None:
        """Refuse, before tokenizing, a prompt whose size alone proves it too long.

        Only a vocabulary of short entries makes this fire (a real model's longest
        entry is a hundred bytes or more); ``prompt_ids`` then bounds the tokenizing."""
        max_token_bytes = engine.info.max_token_bytes
        if not isinstance(max_token_bytes, int) or max_token_bytes <= 0:
            return
        min_tokens = math.ceil(self.prompt_bytes() / (max_token_bytes * _NORMALIZATION_SLACK))
        if min_tokens >= engine.info.max_model_len:
            limit = engine.info.max_model_len
            raise context_exceeded(min_tokens, limit, self.prompt_param, at_least=True)

    def prompt_bytes(self) -> int:
        raise NotImplementedError

    def prompt_ids(self, engine: Engine) -> list[int]:
        raise NotImplementedError

    def _within_context(self, engine: Engine, tokenize: Callable[[int], list[int]]) -> list[int]:
        """``tokenize(max_tokens)``, for the most tokens a prompt that fits may have (one
        is left to generate); a prompt whose prefix proves it longer is refused, having
        tokenized a bounded prefix only (``engine_worker.client.prompt_prefix``)."""
        limit = engine.info.max_model_len
        try:
            return tokenize(limit - 1)
        except PromptTooLongError as exc:
            num = exc.num_tokens_at_least
            raise context_exceeded(num, limit, self.prompt_param, at_least=True) from exc

    def requested_max_tokens(self) -> int | None:
        return self.body.requested_max_tokens()

    def logprobs(self) -> int | None:
        raise NotImplementedError

    def constraints(self) -> dict[str, Any]:
        """Structured-output fields, from ``response_format`` unless a tool call is forced."""
        return _response_format(self.body.response_format)

    def options(self, num_prompt: int, engine: Engine, limit: int) -> SamplingOptions:
        body, defaults = self.body, engine.info.sampling_defaults
        max_model_len = engine.info.max_model_len
        try:
            stop = body.stop_list()
        except ValueError as exc:
            raise APIError(400, str(exc), param="stop") from exc
        requested = self.requested_max_tokens()
        max_tokens = _max_tokens(requested, num_prompt, max_model_len, limit, self.prompt_param)
        if requested is None and isinstance(defaults.get("max_tokens"), int):
            max_tokens = min(max_tokens, defaults["max_tokens"])
        if body.min_tokens > max_tokens:
            refused = f"min_tokens={body.min_tokens} exceeds max_tokens={max_tokens}"
            raise APIError(400, refused, param="min_tokens")
        fields: dict[str, Any] = {
            "max_tokens": max_tokens,
            "seed": body.seed,
            "stop": stop,
            "n": body.n,
            "logprobs": self.logprobs(),
            "ignore_eos": body.ignore_eos,
            "logit_bias": _logit_bias(body.logit_bias),
            **sampling_values(body, defaults),
            **_output_fields(body),
        }
        # NOTE: the constraints win over the body's fields: a tool or reasoning parser that
        # reads special tokens (hermes' <tool_call>) turns skip_special_tokens off, as on
        # vLLM's server; skipping them would hide the call it must read (docs/api.md).
        return SamplingOptions(**(fields | self.constraints()))

    def formatter(self, completion_id: str, model: str) -> Formatter:
        raise NotImplementedError


class ChatInput(_Input[ChatCompletionRequest]):
    endpoint = "chat"
    id_prefix = "chatcmpl"
    prompt_param = "messages"

    def __init__(self, body: ChatCompletionRequest) -> None:
        self.body = body
        self.messages = [m.as_template_dict() for m in body.messages]
        self.tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
        self.output = ChatOutput()

    def check(self, engine: Engine) -> None:
        super().check(engine)
        body = self.body
        if body.top_logprobs is not None and not body.logprobs:
            raise APIError(400, "top_logprobs requires logprobs=true", param="top_logprobs")
        for i, message in enumerate(body.messages):
            if (j := message.refused_part()) is not None:
                param = f"messages.{i}.content.{j}"
                raise APIError(400, "only text content parts are supported", param=param)
        names = {t.function.name for t in body.tools or []}
        choice = body.tool_choice
        if choice is not None and choice != "none" and not body.tools:
            raise APIError(400, "tool_choice needs tools", param="tool_choice")
        if choice is not None and not isinstance(choice, str) and choice.function.name not in names:
            unknown = f"tool_choice names {choice.function.name!r}, which is not in tools"
            raise APIError(400, unknown, param="tool_choice")

    def prompt_bytes(self) -> int:
        size = sum(len(m["content"].encode()) for m in self.messages)
        return size + (len(json.dumps(self.tools).encode()) if self.tools else 0)

    def prompt_ids(self, engine: Engine) -> list[int]:
        tools = self.tools or None
        ids = self._within_context(engine, lambda n: engine.render_chat(self.messages, tools, n))
        choice = self.body.tool_choice
        if isinstance(choice, NamedToolChoice) and self.body.tools:
            named = next(t for t in self.body.tools if t.function.name == choice.function.name)
            self.output = named_call_output(named.function.name, named.function.parameters)
        else:
            self.output = engine.chat_output(self._output_request(), ids)
        return ids

    def _output_request(self) -> dict[str, Any]:
        """The body as vLLM's parsers read it."""
        body = self.body
        request: dict[str, Any] = {"model": body.model, "messages": self.messages}
        if body.tools:
            choice = body.effective_tool_choice()
            request["tools"] = self.tools
            request["tool_choice"] = choice if isinstance(choice, str) else choice.model_dump()
            if choice not in ("auto", "none"):
                # A forced call follows the tool's schema, as if the tool said strict.
                request["tools"] = [_strict(tool) for tool in self.tools]
        if body.parallel_tool_calls is not None:
            request["parallel_tool_calls"] = body.parallel_tool_calls
        if body.response_format is not None:
            request["response_format"] = body.response_format.model_dump(by_alias=True)
        request["include_reasoning"] = body.include_reasoning
        # The parser may turn it off (it never turns it on): see ``options``.
        request["skip_special_tokens"] = body.skip_special_tokens
        return request

    def constraints(self) -> dict[str, Any]:
        if self.output.constraints.keys() & {"json_schema", "structural_tag"}:
            return self.output.constraints
        return super().constraints() | self.output.constraints

    def logprobs(self) -> int | None:
        return (self.body.top_logprobs or 0) if self.body.logprobs else None

    def formatter(self, completion_id: str, model: str) -> Formatter:
        return ChatFormatter(self.body, completion_id, model, self.output.new_parser)


class CompletionInput(_Input[CompletionRequest]):
    endpoint = "completions"
    id_prefix = "cmpl"

    def __init__(self, body: CompletionRequest) -> None:
        self.body = body
        prompt = body.prompt
        self.num_prompts = 1
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            self.num_prompts = len(prompt)
            prompt = prompt[0]
        self.prompt: str | list[int] = prompt  # type: ignore[assignment]

    def check(self, engine: Engine) -> None:
        super().check(engine)
        if self.num_prompts != 1:
            raise APIError(400, "batched prompts are not supported; send one", param="prompt")
        # Text was checked with the body (``protocol.check_text``).
        if not isinstance(self.prompt, str) and any(t < 0 for t in self.prompt):
            raise APIError(400, "token ids must be non-negative", param="prompt")

    def prompt_bytes(self) -> int:
        return len(self.prompt.encode()) if isinstance(self.prompt, str) else 0

    def prompt_ids(self, engine: Engine) -> list[int]:
        if isinstance(self.prompt, str):
            text = self.prompt
            return self._within_context(engine, lambda n: engine.tokenize(text, n))
        return [int(t) for t in self.prompt]

    def requested_max_tokens(self) -> int | None:
        return self.body.max_tokens if self.body.max_tokens is not None else 16

    def logprobs(self) -> int | None:
        return self.body.logprobs

    def formatter(self, completion_id: str, model: str) -> Formatter:
        return CompletionFormatter(self.body, completion_id, model)


EndpointInput = ChatInput | CompletionInput
