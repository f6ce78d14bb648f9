"""What the gateway asks of an engine, in plain types (no vLLM import).

The real engine (``engine_worker.client.engine.VLLMEngine``) and the HTTP tests' fake
engine both implement ``Engine``; the gateway only ever sees these types.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from engine_worker.contract.dlfp_config import DLFPConfig

GrammarKind = Literal["json_schema", "structural_tag"]
"""The structured-output grammars the engine compiles from a JSON spec."""


class EngineDeadError(RuntimeError):
    """The engine core process died or was shut down."""


class EngineNotReadyError(RuntimeError):
    """The engine is still loading."""


class InvalidRequestError(ValueError):
    """The engine refused a request as invalid (maps to 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptTooLongError(InvalidRequestError):
    """A prefix of the prompt alone has more tokens than allowed (``max_tokens`` of
    ``tokenize`` and ``render_chat``); the rest was not tokenized."""

    def __init__(self, num_tokens_at_least: int, max_tokens: int) -> None:
        super().__init__(
            f"the prompt is at least {num_tokens_at_least} tokens, over {max_tokens}", "prompt"
        )
        self.num_tokens_at_least = num_tokens_at_least
        self.max_tokens = max_tokens


@dataclass(frozen=True)
class SamplingOptions:
    """The sampling knobs the OpenAI API exposes, engine-neutral."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    n: int = 1
    logprobs: int | None = None
    """None = no logprobs; k >= 0 = the chosen token plus the top k alternatives."""
    ignore_eos: bool = False
    json_schema: dict[str, Any] | None = None
    json_object: bool = False
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] | None = None
    structural_tag: str | None = None
    """A JSON structural tag (vLLM's structured outputs), e.g. to force a tool call."""
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    min_tokens: int = 0
    """No end-of-sequence or stop token before this many tokens."""
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    bad_words: tuple[str, ...] = ()
    """Words the model may not complete (the engine tokenizes them)."""
    allowed_token_ids: tuple[int, ...] | None = None
    """None = every token; else sample only among these."""
    watermarking: bool | None = None
    """None = the engine's default (a watermark only if the engine has one configured)."""
    ttft_slo_ms: float | None = None
    """The request's own time-to-first-token objective (its or its tenant's), ms; None =
    the controller's ``ttft_slo_ms`` (the engine plans its prefill order to it)."""
    itl_slo_ms: float | None = None
    """The request's own inter-token objective, ms; None = the controller's ``itl_slo_ms``
    (the engine plans the prefill beside its stream to it)."""


TTFT_SLO_ARG = "dlfp_ttft_slo_ms"
ITL_SLO_ARG = "dlfp_itl_slo_ms"
"""Where a request's own objectives travel to the scheduler: vLLM's
``SamplingParams.extra_args`` under these keys."""


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass
class ChoiceDelta:
    """New output of one choice since the previous chunk."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None


@dataclass
class GenerationChunk:
    """One engine output: new tokens of one or more choices."""

    choices: list[ChoiceDelta]
    num_prompt_tokens: int
    finished: bool
    num_cached_tokens: int = 0


class RequestStream(ABC):
    """One engine request's outputs, and the one way to end it early.

    Iterate it for its chunks; iteration stops after the chunk marked ``finished``.
    ``aclose()`` ends it: unless it finished, the engine request is aborted, whether or
    not it was ever iterated (an async generator closed before its first ``anext`` runs
    none of its cleanup, which is why this is a class). Idempotent; iterating to the end
    needs no ``aclose()``, and a stream dropped unfinished without it holds its engine
    slot until the request ends by itself."""

    def __init__(self) -> None:
        self._finished = False
        self._closed = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> GenerationChunk:
        if self._finished or self._closed:
            raise StopAsyncIteration
        chunk = await self._next()
        if chunk.finished:
            self._finished = True
            self._release()
        return chunk

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._finished:
            self._release()
            await self._abort()

    @abstractmethod
    async def first_output(self) -> bool:
        """Returns once the engine has produced the request's first output, whether or
        not anyone has read it: True; False if the request ended without one (an
        error). The time a first token took is the engine's, never the reader's. It may
        wait for good where the reader took an error first: the caller cancels it when
        the request ends."""

    @abstractmethod
    async def _next(self) -> GenerationChunk:
        """The next output of the request (the engine's errors as this module's)."""

    @abstractmethod
    def _release(self) -> None:
        """Free what the stream holds on this side once it ends."""

    @abstractmethod
    async def _abort(self) -> None:
        """Abort the request in the engine; must not raise, and must not be cancelled
        half-way (the caller may itself be a task being cancelled)."""


@dataclass
class ToolCallDelta:
    """A tool call, or (streamed) a piece of one: arguments arrive in pieces."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


@dataclass
class ParsedOutput:
    """Model output read by the configured parsers: thinking, answer and tool calls."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


class OutputParser(Protocol):
    """Reads one choice's output; a streamed choice keeps its state here."""

    def parse(self, text: str, token_ids: list[int]) -> ParsedOutput: ...

    def parse_delta(self, text: str, token_ids: list[int], finished: bool) -> ParsedOutput | None:
        """None: nothing to send yet (e.g. a tag still incomplete)."""
        ...


@dataclass
class ChatOutput:
    """How a chat request's output is constrained and read."""

    constraints: dict[str, Any] = field(default_factory=dict)
    """``SamplingOptions`` fields to set (structured outputs forcing a tool call)."""
    new_parser: Callable[[], OutputParser] | None = None
    """A fresh parser per choice; None = the text is the content."""


@dataclass
class EngineInfo:
    model_name: str
    max_model_len: int
    device: str
    max_token_bytes: int | None = None
    """The tokenizer's longest token in UTF-8 bytes: a prompt of B bytes is at least
    B / max_token_bytes tokens (the cheap length check before tokenizing); None = unknown."""
    priority_scheduling: bool = False
    """Whether vLLM schedules by request priority (``policy: priority``)."""
    async_scheduling: bool | None = None
    batch_queue_size: int | None = None
    """vLLM's ``max_concurrent_batches``: above 1 the scheduler runs ahead of execution."""
    dtype: str | None = None
    """The dtype the engine runs in, resolved at start (``auto`` by the CPU's capability)."""
    cpu_features: list[str] = field(default_factory=list)
    """The CPU features the dtype choice read (empty off the CPU)."""
    root: str = ""
    """What the served name stands for: the model directory, or the embedded model."""
    sampling_defaults: dict[str, Any] = field(default_factory=dict)
    """The model's generation-config sampling values (vLLM's names), for unset fields."""


class Engine(Protocol):
    """The engine as the gateway uses it."""

    info: EngineInfo

    @property
    def is_ready(self) -> bool: ...

    @property
    def is_dead(self) -> bool: ...

    @property
    def num_unfinished_requests(self) -> int:
        """Requests the engine still holds state for (vLLM's output processor): 0 when
        nothing runs; a count that stays up with nothing running is a leak."""
        ...

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    @property
    def tokenizer_lock(self) -> threading.Lock:
        """Held by any use of the tokenizer outside the engine's own methods (which take
        it themselves), such as the ``ChatOutput`` parsers: HF fast tokenizers must not
        be used from two threads at once."""
        ...

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> list[int]:
        """The templated conversation's token ids; with ``max_tokens``, as ``tokenize``."""
        ...

    def chat_output(self, request: dict[str, Any], prompt_token_ids: list[int]) -> ChatOutput:
        """Tool and reasoning handling for an OpenAI chat body (``messages``, ``tools``,
        ``tool_choice``, ...); raises InvalidRequestError for a bad tool choice."""
        ...

    def tokenize(self, text: str, max_tokens: int | None = None) -> list[int]:
        """The text's token ids. With ``max_tokens``, a text whose prefix alone has more
        tokens raises PromptTooLongError having tokenized only prefixes of it
        (``engine_worker.client.prompt_prefix``: never a text that has at most max_tokens)."""
        ...

    async def check_grammar(self, kind: GrammarKind, spec: str) -> None:
        """Compile a grammar (``json_schema``: the schema as JSON text; ``structural_tag``:
        vLLM's structural tag) apart from the engine's shared compile worker; raises
        InvalidRequestError (no ``param``) if it fails or takes too long to compile."""
        ...

    async def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        options: SamplingOptions,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> RequestStream:
        """Validate and enqueue; raises InvalidRequestError before anything streams.
        A failed submission leaves nothing in the engine."""
        ...

    async def get_dlfp_state(self) -> dict[str, Any]: ...

    async def apply_dlfp_config(self, config: DLFPConfig) -> dict[str, Any]: ...

    async def get_dlfp_steps(self, since_step: int) -> list[dict[str, Any]]: ...

    async def reset_dlfp(self, *, model: bool = False) -> dict[str, Any]: ...
