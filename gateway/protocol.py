"""OpenAI request and response bodies (the subset this gateway serves).

Bounds live on the fields so that a bad value is a 400 with the field named,
before anything reaches the engine. No field is silently ignored: a request field
is honoured, refused by name unless sent with its no-op value (a field marked
``Refused``), or in ``IGNORED_REASONS``, harmless; docs/api.md lists all three and
any other field is a 400 naming it. A field sent as ``null`` counts as unset.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.errors import APIError

MAX_N = 8
MAX_STOP = 4
MAX_TOP_LOGPROBS = 20
MAX_STOP_TOKEN_IDS = 64
MAX_BAD_WORDS = 128
"""vLLM's own limit (``VLLM_MAX_NUM_BAD_WORDS``) is on the token sequences the words make,
up to two a word: past it, vLLM's error names ``bad_words``."""
MAX_ALLOWED_TOKEN_IDS = 8192

MAX_PRIORITY = 1000
"""Bound of a request's priority, either way (the body's ``priority``, ``X-Priority``)."""

TokenCount = Annotated[int, Field(ge=1, le=1_000_000)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
Seed = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Priority = Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
CacheSalt = Annotated[str, Field(min_length=1, max_length=256)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
"""Checked against the vocabulary by the engine (vLLM's own check, naming the field)."""

IGNORED_REASONS: dict[str, str] = {
    # OpenAI's bookkeeping: nothing is stored, billed or tracked here.
    "user": "an end-user id for OpenAI's abuse monitoring; nothing is tracked",
    "safety_identifier": "an end-user id for OpenAI's abuse monitoring; nothing is tracked",
    "metadata": "tags for stored completions; nothing is stored",
    "store": "chat and completions: nothing is stored (/v1/responses honours it)",
    "service_tier": "there is one tier; order is set by priority",
    "prompt_cache_key": "a cache-routing hint; the prefix cache needs none (cache_salt isolates)",
    "prompt_cache_retention": "how long OpenAI keeps a cached prefix; the engine's prefix cache "
    "keeps blocks until it needs the memory",
    "prompt_cache_options": "OpenAI's prefix-cache options; the engine's prefix cache has none",
    "client_metadata": "a client's telemetry tags; nothing is tracked",
    # vLLM's routing and serving hints: the text generated is the same.
    "request_id": "the completion id is the gateway's own, unique (X-Request-Id is logged)",
    "session_id": "a routing hint that groups related requests; there is one engine",
    "kv_transfer_params": "disaggregated prefill; no KV connector is configured",
    "ec_transfer_params": "disaggregated encoder cache; no connector is configured",
    "stream_interval": "batches streamed tokens; the same text arrives, one event per delta",
    "routed_experts_prompt_start": "routed-expert data is never returned",
    "truncation_side": "applies only with truncate_prompt_tokens, which is refused",
    # vLLM reads these on its /render endpoints or for media only.
    "mm_payload": "vLLM reads it on its /render endpoints only",
    "return_mm_kwargs": "vLLM reads it on its /render endpoints only",
    "return_token_offsets": "vLLM reads it on its /render endpoints only",
    "media_io_kwargs": "loads image, audio or video input, which is refused",
    "mm_processor_kwargs": "processes image, audio or video input, which is refused",
}
"""Accepted and deliberately without effect, each with why (docs/api.md lists them)."""

IGNORED_FIELDS = frozenset(IGNORED_REASONS)


@dataclass(frozen=True)
class Refused:
    """Marks a request field (``Annotated[..., Refused(reason)]``) accepted only at a value
    without effect: its default, or one of ``also``. Any other value is a 400 naming it."""

    reason: str
    also: tuple[Any, ...] = ()

    def is_no_op(self, value: Any, default: Any) -> bool:
        return bool(value == default or value in self.also)

    def message(self, name: str, default: Any) -> str:
        no_ops = [f"send {json.dumps(v)}" for v in (default, *self.also) if v is not None]
        return f"{name} is not supported: {self.reason}; " + " or ".join(["leave it out", *no_ops])


def refused_fields(model: type[BaseModel]) -> dict[str, Refused]:
    """The fields of ``model`` refused unless sent with their no-op value."""
    return {
        name: marker
        for name, info in model.model_fields.items()
        for marker in info.metadata
        if isinstance(marker, Refused)
    }


def _unset_dropped(data: Any, ignored: frozenset[str] = frozenset()) -> Any:
    """``null`` means unset; ignored fields are dropped before validation."""
    if not isinstance(data, dict):
        return data
    return {k: v for k, v in data.items() if v is not None and k not in ignored}


text_checked: ContextVar[bool] = ContextVar("text_checked", default=False)
"""Set for a request whose raw body cannot hold a lone surrogate (``gateway.body_guard``):
``check_text`` then has nothing to find, and skips its walk."""


def check_text(data: Any) -> None:
    """The one text check: every string of a body, keys included, must be valid Unicode.

    JSON may carry a lone surrogate (``"\\ud800"``) that no UTF-8 encoder accepts: the
    tokenizer, vLLM's msgspec encoding and the error renderer would each fail on it, the
    last two after the engine registered the request. So it is refused before the body is
    validated, with its JSON path as ``param``; the message never echoes the text.
    Iterative, so that no nesting depth can overflow the stack; a path is spelled only
    for the string refused, so numbers and the like cost one type check each.
    """
    if text_checked.get():
        return
    pending: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            if not _is_unicode(value):
                where = ".".join(str(part) for part in path)
                raise APIError(
                    400,
                    f"{where or 'the body'}: the text is not valid Unicode (a lone surrogate)",
                    param=where or None,
                    code="invalid_value",
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and not _is_unicode(key):
                    pending.append((key, (*path, "<key>")))
                elif isinstance(item, str | dict | list | tuple):
                    pending.append((item, (*path, key)))
        elif isinstance(value, list | tuple):
            pending.extend(
                (item, (*path, i))
                for i, item in enumerate(value)
                if isinstance(item, str | dict | list | tuple)
            )


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Request(BaseModel):
    # An unknown field is a 400 naming it (errors.py words the message).
    model_config = ConfigDict(extra="forbid")
    ignored: ClassVar[frozenset[str]] = IGNORED_FIELDS
    """The ``IGNORED_REASONS`` fields this endpoint drops (one it honours is not here)."""

    @model_validator(mode="before")
    @classmethod
    def _drop_unset(cls, data: Any) -> Any:
        # NOTE: first, on the raw body: a message that quotes a lone surrogate (pydantic's
        # own errors do) cannot be rendered, so no later check may see one.
        check_text(data)
        return _unset_dropped(data, cls.ignored)

    @model_validator(mode="after")
    def _refuse(self) -> Self:
        fields = type(self).model_fields
        for name, marker in refused_fields(type(self)).items():
            default = fields[name].default
            if name in self.model_fields_set and not marker.is_no_op(getattr(self, name), default):
                raise APIError(400, marker.message(name, default), param=name)
        return self


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _drop_unset(cls, data: Any) -> Any:
        return _unset_dropped(data)


class TextPart(_Part):
    type: Literal["text"]
    text: str


class OtherPart(BaseModel):
    """An image, audio or file part: accepted by the schema, refused by the endpoint."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image_url", "input_audio", "file", "refusal"]


class FunctionCall(_Part):
    name: str = Field(min_length=1, max_length=256)
    arguments: str = ""


class ToolCall(_Part):
    id: str = Field(min_length=1, max_length=256)
    type: Literal["function"] = "function"
    function: FunctionCall


class HistoryToolCall(ToolCall):
    """A call in an assistant message of the history."""

    index: int | None = Field(default=None, ge=0)
    """A streamed call's position, which some clients keep in the history; the list's
    order is the calls' order, so it is not read."""


class ChatMessage(_Part):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | OtherPart] | None = None
    name: str | None = None
    tool_calls: list[HistoryToolCall] | None = Field(default=None, max_length=128)
    """Assistant messages: the calls it made."""
    tool_call_id: str | None = None
    """Tool messages: the call this message answers."""
    reasoning: str | None = None
    """Assistant messages: their thinking text (vLLM's field); not sent to the model."""
    reasoning_content: str | None = None
    """The same under its older name (DeepSeek's, vLLM's before 0.10, LiteLLM's), which
    clients still send back in histories; not sent to the model either."""
    refusal: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def refused_part(self) -> int | None:
        """Index of the first image, audio or file part, if any."""
        if isinstance(self.content, list):
            for index, part in enumerate(self.content):
                if isinstance(part, OtherPart) and part.type != "refusal":
                    return index
        return None

    def as_template_dict(self) -> dict[str, Any]:
        """The message as chat templates read it."""
        out: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [call.model_dump(exclude={"index"}) for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class StreamOptions(_Part):
    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False
    """vLLM's extension, accepted; usage comes once, at the end."""


class _SchemaFormat(_Part):
    """What a JSON-schema output format names, in chat and Responses bodies alike."""

    name: str = Field(default="response", max_length=64)
    strict: bool | None = None
    description: str | None = None


class JSONSchemaFormat(_SchemaFormat):
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")


class ResponseFormat(_Part):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format.json_schema is required for type json_schema")
        return self


class EngineFields(_Request):
    """vLLM's output extensions that all three of its request models take (/v1/responses
    hands them on to the chat request)."""

    stop_token_ids: list[TokenId] | None = Field(default=None, max_length=MAX_STOP_TOKEN_IDS)
    """vLLM extension: also stop at any of these tokens (kept in the text unless special)."""
    include_stop_str_in_output: StrictBool = False
    """vLLM extension: keep the stop string that ended the text."""
    skip_special_tokens: StrictBool = True
    """vLLM extension: leave special tokens out of the text. A tool or reasoning parser
    that reads special tokens turns it off (``ChatInput.options``)."""
    watermarking: StrictBool | None = None
    """vLLM extension: the engine's watermark on or off (none unless the engine has one)."""
    structured_outputs: Annotated[
        dict[str, Any] | None, Refused("use response_format, or tool_choice to force a call")
    ] = None
    vllm_xargs: Annotated[
        dict[str, Any] | None, Refused("no sampling plugin reads them", also=({},))
    ] = None
    ttft_slo_ms: float | None = Field(default=None, ge=100, le=600_000)
    """Gateway extension: this request's time-to-first-token objective, ms (100 to
    600,000); else its tenant's, else the gateway's. Admission judges the request by it,
    and the engine orders prefills by it (docs/api.md, "Objectives per request")."""
    itl_slo_ms: float | None = Field(default=None, ge=10, le=60_000)
    """Gateway extension: this request's inter-token objective, ms (10 to 60,000); else its
    tenant's, else the gateway's. The controller plans the prefill beside its stream to it."""


class TemplateFields(_Request):
    """vLLM's chat-templating extensions, refused: the engine templates the messages and
    tools alone (``Engine.render_chat``), and the variables vLLM's server passes to the
    template reach its reasoning and tool parsers too (a thinking switch changes how the
    output is read), which the gateway builds without them."""

    chat_template: Annotated[str | None, Refused("a client's Jinja template is never run")] = None
    chat_template_kwargs: Annotated[
        dict[str, Any] | None, Refused("template variables are not passed", also=({},))
    ] = None
    reasoning_effort: Annotated[
        str | None, Refused("it sets the template's thinking mode, which is not passed")
    ] = None
    documents: Annotated[Any, Refused("documents are not passed to the template")] = None
    add_generation_prompt: Annotated[
        StrictBool, Refused("the assistant's turn is always opened")
    ] = True
    continue_final_message: Annotated[
        StrictBool, Refused("the last message is never continued")
    ] = False
    add_special_tokens: Annotated[
        StrictBool, Refused("only the template's own special tokens are used")
    ] = False


class _SamplingFields(EngineFields):
    model: str = Field(min_length=1, max_length=256)
    max_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    """Unset = the model's generation config (vLLM's --generation-config auto), else 1."""
    top_p: TopP | None = None
    seed: Seed | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(
        default=None, max_length=1024
    )
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    top_k: int | None = Field(default=None, ge=-1, le=1_000_000)
    """vLLM extension: sample among the k likeliest tokens (-1 or 0 = all)."""
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    """vLLM extension: drop tokens less likely than min_p times the likeliest."""
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0)
    """vLLM extension: above 1 discourages repeating prompt and output tokens."""
    ignore_eos: StrictBool = False
    """vLLM extension: keep generating past the end-of-sequence token."""
    priority: Priority = 0
    """vLLM extension: lower is served first."""
    cache_salt: CacheSalt | None = None
    """vLLM extension: prefix-cache entries are shared only between equal salts."""
    return_token_ids: StrictBool = False
    """vLLM extension: each streamed choice also carries its generated ``token_ids``."""
    min_tokens: int = Field(default=0, ge=0, le=1_000_000)
    """vLLM extension: no end-of-sequence or stop token before this many tokens."""
    spaces_between_special_tokens: StrictBool = True
    """vLLM extension: a space between adjacent special tokens in the text."""
    bad_words: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=MAX_BAD_WORDS
    )
    """vLLM extension: words the model may not complete."""
    allowed_token_ids: list[TokenId] | None = Field(
        default=None, min_length=1, max_length=MAX_ALLOWED_TOKEN_IDS
    )
    """vLLM extension: sample only among these tokens."""
    # vLLM's extensions the gateway does not implement.
    use_beam_search: Annotated[StrictBool, Refused("beam search is not implemented")] = False
    length_penalty: Annotated[
        float, Refused("it applies to beam search, which is not implemented")
    ] = 1.0
    prompt_logprobs: Annotated[int | None, Refused("prompt logprobs are not returned")] = None
    logprob_token_ids: Annotated[list[int] | None, Refused("use top_logprobs", also=([],))] = None
    return_tokens_as_token_ids: Annotated[
        StrictBool | None, Refused("logprob tokens are text", also=(False,))
    ] = None
    return_prompt_text: Annotated[
        StrictBool | None, Refused("the templated prompt is not returned", also=(False,))
    ] = None
    truncate_prompt_tokens: Annotated[
        int | None, Refused("a prompt is never cut: one too long is refused")
    ] = None
    thinking_token_budget: Annotated[int | None, Refused("no thinking budget is enforced")] = None
    repetition_detection: Annotated[
        dict[str, Any] | None, Refused("repetition detection is not implemented")
    ] = None
    echo: Annotated[StrictBool, Refused("the prompt is not echoed")] = False

    def stop_list(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOP or any(not s for s in stops):
            raise ValueError(f"stop takes at most {MAX_STOP} non-empty strings")
        return tuple(stops)


class FunctionDefinition(_Part):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(_Part):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Part):
    name: str


class NamedToolChoice(_Part):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(_SamplingFields, TemplateFields):
    messages: list[ChatMessage] = Field(min_length=1, max_length=1024)
    max_completion_tokens: TokenCount | None = None
    logprobs: StrictBool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    """Unset = ``auto`` with tools, ``none`` without (OpenAI's rule)."""
    parallel_tool_calls: StrictBool | None = None
    include_reasoning: StrictBool = True
    """vLLM extension: with a reasoning parser, return the thinking text in ``reasoning``."""
    audio: Annotated[Any, Refused("audio output is not supported")] = None
    prediction: Annotated[Any, Refused("predicted outputs are not supported")] = None
    web_search_options: Annotated[Any, Refused("web search is not supported")] = None
    modalities: Annotated[Any, Refused("the output is text only", also=(["text"],))] = None

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def effective_tool_choice(self) -> str | NamedToolChoice:
        if self.tool_choice is not None:
            return self.tool_choice
        return "auto" if self.tools else "none"


class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[int] = Field(min_length=0)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    response_format: ResponseFormat | None = None
    add_special_tokens: Annotated[
        StrictBool, Refused("the tokenizer's special tokens are always added")
    ] = True
    suffix: Annotated[str | None, Refused("text after the insertion is not read", also=("",))] = (
        None
    )
    prompt_embeds: Annotated[
        Any, Refused("prompt embeddings are not read; send text or token ids")
    ] = None

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


# --- responses ---


MAX_INPUT_ITEMS = 1024
"""Items a ``/v1/responses`` input list may hold."""


class ResponsesTool(_Part):
    """A Responses function tool: the chat form, flattened. Any other type (a built-in
    tool) is refused as a whole; a key OpenAI's function tool does not define is a 400
    naming it (``tools.N.key``), and those it defines for features not served here are
    refused unless sent with their no-op value."""

    type: Literal["function"]
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: Annotated[
        StrictBool | None, Refused("there is no tool search: every tool is rendered", also=(False,))
    ] = None
    async_: Annotated[
        StrictBool | None,
        Refused("there is no asynchronous tool calling", also=(False,)),
    ] = Field(default=None, alias="async")
    allowed_callers: Annotated[
        list[Literal["direct", "programmatic"]] | None,
        Refused("there is no programmatic tool calling", also=(["direct"],)),
    ] = None
    output_schema: Annotated[
        dict[str, Any] | None, Refused("a function's output schema is not shown to the model")
    ] = None

    @model_validator(mode="before")
    @classmethod
    def _function_only(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise ValueError(f"built-in tools ({kind}) are not supported")
        return data

    @field_validator("defer_loading", "async_", "allowed_callers", "output_schema")
    @classmethod
    def _no_op_only(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        field = cls.model_fields[name]
        marker = refused_fields(cls)[name]
        if not marker.is_no_op(value, field.default):
            raise ValueError(marker.message(field.alias or name, field.default))
        return value


class NamedResponsesTool(NamedFunction):
    """A Responses ``tool_choice`` naming a function: the chat form, flattened."""

    type: Literal["function"]


MAX_FORMAT_DESCRIPTION_CHARS = 4096
"""Bound of ``text.format.description``. It is never sent to the model, so the context
does not bound it, and it is echoed in every Response object of a request (a stream's
``response.created``, ``response.in_progress`` and final event, and the stored copy)."""


class TextFormat(_SchemaFormat):
    """A Responses ``text.format``: a chat ``response_format``, flattened."""

    type: Literal["text", "json_object", "json_schema"]
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = Field(default=None, max_length=MAX_FORMAT_DESCRIPTION_CHARS)
    """What the format is for: echoed in the response, not sent to the model."""

    @field_validator("schema_")
    @classmethod
    def _schema_format_only(
        cls, value: dict[str, Any] | None, info: ValidationInfo
    ) -> dict[str, Any] | None:
        if info.data.get("type", "json_schema") != "json_schema":
            raise ValueError("only a json_schema format takes a schema")
        return value


class TextConfig(_Part):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    """Only OpenAI's default, ``medium``: nothing steers this model's length."""

    @field_validator("verbosity")
    @classmethod
    def _default_verbosity_only(cls, value: str | None) -> str | None:
        if value not in (None, "medium"):
            raise ValueError(
                "verbosity is not supported: nothing steers the model's length; leave it out, "
                'send "medium", or bound the answer with max_output_tokens'
            )
        return value


class ResponsesStreamOptions(_Part):
    include_obfuscation: StrictBool = True
    """OpenAI pads streamed deltas against length side channels; here nothing is padded,
    either way (docs/api.md)."""


RESPONSES_INCLUDE_NO_OP = frozenset({"reasoning.encrypted_content"})
"""``include`` values accepted without effect: reasoning items are returned in clear text
(with ``content``), never encrypted, so there is nothing to include."""
OUTPUT_LOGPROBS = "message.output_text.logprobs"
"""The ``include`` value that returns each output text part's token logprobs."""


class ResponsesRequest(EngineFields, TemplateFields):
    ignored: ClassVar[frozenset[str]] = IGNORED_FIELDS - {"store"}
    model: str = Field(min_length=1, max_length=256)
    input: str | list[dict[str, Any]]
    """A string (bounded by the body size), or at most ``MAX_INPUT_ITEMS`` items."""

    @field_validator("input")
    @classmethod
    def _items_bounded(cls, value: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        # NOTE: not max_length on the field: that bounded a string input to 1,024
        # characters too.
        if isinstance(value, list) and len(value) > MAX_INPUT_ITEMS:
            raise ValueError(f"at most {MAX_INPUT_ITEMS} input items")
        for i, item in enumerate(value if isinstance(value, list) else []):
            # Looked up in the store before anything else reads the items.
            if item.get("type") == "item_reference" and not isinstance(item.get("id"), str):
                raise APIError(400, "an item_reference's id is a string", param=f"input.{i}.id")
        return value

    instructions: str | None = None
    max_output_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    seed: Seed | None = None
    tools: list[ResponsesTool] | None = Field(default=None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedResponsesTool | None = None
    parallel_tool_calls: StrictBool | None = None
    text: TextConfig | None = None
    stream: StrictBool = False
    priority: Priority = 0
    cache_salt: CacheSalt | None = None
    store: StrictBool = True
    """Keep the response for ``previous_response_id``, ``item_reference`` and
    ``GET /v1/responses/{id}`` (OpenAI's default)."""
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=256)
    """Continue a stored response's conversation: its input and output come first."""
    background: Annotated[
        StrictBool | None, Refused("there is no background mode", also=(False,))
    ] = None
    include: list[str] | None = Field(default=None, max_length=8)
    """``message.output_text.logprobs`` honoured; ``reasoning.encrypted_content`` accepted
    without effect; the built-in tools' values refused."""
    stop: str | list[str] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    """Alternatives a token, returned with ``include: ["message.output_text.logprobs"]``."""
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(
        default=None, max_length=1024
    )
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    top_k: int | None = Field(default=None, ge=-1, le=1_000_000)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0)
    ignore_eos: StrictBool = False
    include_reasoning: StrictBool = True
    max_tool_calls: int | None = Field(default=None, ge=0, le=128)
    """At most this many function calls in the output; 0 = none (``tool_choice`` none)."""
    stream_options: ResponsesStreamOptions | None = None
    truncation: Annotated[
        Literal["auto", "disabled"] | None,
        Refused("a conversation is never cut: one too long is refused", also=("disabled",)),
    ] = None
    reasoning: Annotated[
        dict[str, Any] | None,
        Refused("the model's reasoning effort and summaries are not steered", also=({},)),
    ] = None
    """OpenAI's ``{"effort", "summary"}``; with every key null it is the no-op ``{}``."""
    prompt: Annotated[Any, Refused("stored prompt templates are not kept")] = None
    conversation: Annotated[Any, Refused("conversations are not stored")] = None
    context_management: Annotated[
        Any, Refused("the context is never compacted: one too long is refused", also=([],))
    ] = None
    enable_response_messages: Annotated[
        StrictBool, Refused("the model's raw messages are not returned")
    ] = False
    previous_input_messages: Annotated[
        Any, Refused("a raw-message history is not read; send input items", also=([],))
    ] = None

    @field_validator("reasoning", mode="before")
    @classmethod
    def _reasoning_unset_keys(cls, value: Any) -> Any:
        # {"effort": null, "summary": null} is what several clients send for "no reasoning".
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if v is not None}
        return value

    @field_validator("include")
    @classmethod
    def _include_known(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            if item != OUTPUT_LOGPROBS and item not in RESPONSES_INCLUDE_NO_OP:
                raise ValueError(
                    f"include {item!r} is not supported: there are no built-in tools or "
                    f"image inputs; send [], {OUTPUT_LOGPROBS!r} or "
                    "'reasoning.encrypted_content'"
                )
        return value

    def wants_logprobs(self) -> bool:
        return OUTPUT_LOGPROBS in (self.include or [])


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, num_prompt_tokens: int, num_generated_tokens: int) -> Usage:
        return cls(
            prompt_tokens=num_prompt_tokens,
            completion_tokens=num_generated_tokens,
            total_tokens=num_prompt_tokens + num_generated_tokens,
        )

    def as_responses(self) -> dict[str, Any]:
        """The same counts in the Responses API's ``usage`` form."""
        return {
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.total_tokens,
        }


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] | None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning: str | None = None
    """The thinking text, when a reasoning parser is set (vLLM 0.32's field)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ModelPermission(BaseModel):
    """vLLM's server returns one of these per card; clients only read it."""

    id: str
    object: Literal["model_permission"] = "model_permission"
    created: int
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(BaseModel):
    """The fields vLLM's server returns (its benchmark client reads ``root``)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "dlfp-gateway"
    root: str
    """The model the name serves: its directory, or the embedded model's name."""
    parent: str | None = None
    max_model_len: int
    permission: list[ModelPermission]


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ResponseObject(BaseModel):
    """The Response object of ``/v1/responses`` (kept loose: its shape is OpenAI's)."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["response"]
    status: str
    output: list[dict[str, Any]]
