"""A FAKE engine for quick HTTP-layer tests: no vLLM, no model.

It "generates" by cycling through a fixed word list, one token per chunk, so
the HTTP layer's streaming, errors and metrics can be tested in milliseconds.
Nothing here stands in for the real engine's behaviour.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from engine_worker.client.prompt_prefix import encode_within
from engine_worker.contract.api import (
    ChatOutput,
    ChoiceDelta,
    EngineDeadError,
    EngineInfo,
    GenerationChunk,
    GrammarKind,
    InvalidRequestError,
    RequestStream,
    SamplingOptions,
    TokenLogprob,
)
from engine_worker.contract.dlfp_config import DLFPConfig

BAD_GRAMMAR = "__bad_grammar__"
VOCAB_SIZE = 1000
WORDS = ["fake", " token", " stream", " from", " the", " fake", " engine", "."]
_SCALARS: dict[str, Any] = {
    "integer": 1,
    "number": 1.5,
    "string": "fake",
    "boolean": True,
    "null": None,
    "array": [],
}


def schema_instance(schema: Any, defs: dict[str, Any] | None = None) -> Any:
    """A canned JSON value that satisfies the simple schemas clients send (objects with
    required properties, ``$ref`` to ``$defs``, ``anyOf``, ``enum``, arrays): what the
    FAKE engine "generates" under a JSON-schema constraint. Not a general generator."""
    if not isinstance(schema, dict):
        return {}
    defs = defs if defs is not None else schema.get("$defs") or schema.get("definitions") or {}
    if "$ref" in schema:
        return schema_instance(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {}), defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return schema_instance(schema[key][0], defs)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_instance(properties[name], defs) for name in properties}
    if kind == "array":
        count = max(int(schema.get("minItems", 1)), 1)
        return [schema_instance(schema.get("items") or {}, defs) for _ in range(count)]
    return _SCALARS.get(kind, "fake")


class FakeEngine:
    """Implements ``engine_worker.contract.api.Engine`` with canned output."""

    def __init__(
        self,
        model_name: str = "fake-model",
        max_model_len: int = 256,
        delay_s: float = 0.0,
        ready: bool = True,
        tokenize_delay_s: float = 0.0,
    ) -> None:
        self.info = EngineInfo(model_name, max_model_len, "fake")
        self.delay_s = delay_s
        self._ready = ready
        self._dead = False
        self.running: set[str] = set()
        self.aborted: list[str] = []
        self.submitted: list[tuple[str, list[int], SamplingOptions, int]] = []
        self.fail_after_tokens: int | None = None
        self.failure: Exception = EngineDeadError("fake engine died")
        self.tokenize_delay_s = tokenize_delay_s
        self.tokenize_gate: threading.Event | None = None
        """When set by a test, ``tokenize`` holds until the gate opens (at most 30 s)."""
        self.tokenize_entered = threading.Event()
        self.num_tokenized = 0
        self.encoded_lengths: list[int] = []
        """The length of every text (or prefix) tokenized, in characters."""
        self.tokenizer_lock = threading.Lock()
        self.dlfp_config = DLFPConfig()
        self.num_dlfp_resets = 0
        self.last_reset_model = False
        self.dlfp_failure: Exception | None = None
        self.dlfp_delay_s = 0.0
        self.dlfp_gate: asyncio.Event | None = None
        """When set by a test, the engine-core calls hold until it opens."""
        self.dlfp_state_overrides: dict[str, Any] = {}
        """Keys of ``get_dlfp_state``'s answer a test sets (the controller's state fields)."""
        self.output = ChatOutput()
        """What ``chat_output`` returns; a test may set a parser here."""
        self.output_requests: list[dict[str, Any]] = []
        self.rendered_tools: list[dict[str, Any]] | None = None
        self.checked_grammars: list[tuple[GrammarKind, str]] = []

    @property
    def is_ready(self) -> bool:
        return self._ready and not self._dead

    @property
    def is_dead(self) -> bool:
        return self._dead

    @property
    def num_unfinished_requests(self) -> int:
        return len(self.running)

    def kill(self) -> None:
        self._dead = True

    async def start(self) -> None:
        self._ready = True

    async def shutdown(self) -> None:
        self._ready = False

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> list[int]:
        self.rendered_tools = tools
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return self.tokenize(text, max_tokens)

    def chat_output(self, request: dict[str, Any], prompt_token_ids: list[int]) -> ChatOutput:
        self.output_requests.append(request)
        return self.output

    def tokenize(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Blocks for ``tokenize_delay_s``, and refuses what the real tokenizer refuses;
        one token a character, bounded by ``max_tokens`` as the real engine is."""
        self.num_tokenized += 1
        self.tokenize_entered.set()
        if self.tokenize_gate is not None:
            self.tokenize_gate.wait(30.0)
        time.sleep(self.tokenize_delay_s)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise TypeError("TextEncodeInput must be Union[TextInputSequence, ...]") from None
        return encode_within(text, max_tokens, self._encode)

    def _encode(self, text: str) -> list[int]:
        self.encoded_lengths.append(len(text))
        return [ord(ch) % 1000 for ch in text]

    async def check_grammar(self, kind: GrammarKind, spec: str) -> None:
        """Refuses a spec containing ``BAD_GRAMMAR``, as the real one refuses a failing or
        slow compile."""
        self.checked_grammars.append((kind, spec))
        if BAD_GRAMMAR in spec:
            raise InvalidRequestError("the fake engine refuses this grammar")

    async def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        options: SamplingOptions,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> RequestStream:
        if self._dead:
            raise EngineDeadError("fake engine is dead")
        if any(t >= VOCAB_SIZE for t in prompt_token_ids):
            raise InvalidRequestError("token id out of vocabulary", param="prompt")
        for name in ("stop_token_ids", "allowed_token_ids"):  # as vLLM checks them
            if any(t >= VOCAB_SIZE for t in getattr(options, name) or ()):
                raise InvalidRequestError(f"{name}: token id out of vocabulary", param=name)
        self.submitted.append((request_id, prompt_token_ids, options, priority))
        self.running.add(request_id)
        return _FakeRequestStream(self, request_id, len(prompt_token_ids), options)

    async def _engine_core_call(self) -> None:
        await asyncio.sleep(self.dlfp_delay_s)
        if self.dlfp_gate is not None:
            await self.dlfp_gate.wait()

    async def get_dlfp_state(self) -> dict[str, Any]:
        await self._engine_core_call()
        if self.dlfp_failure is not None:
            raise self.dlfp_failure
        config = self.dlfp_config
        target_ms = 0.6 * config.itl_slo_ms if config.target_ms == "auto" else config.target_ms
        is_planned = config.controller == "dlfp-ct" and config.feedforward
        plan = str(config.plan) if is_planned else None
        return {
            "cap_tokens": config.initial_cap_tokens,
            "num_updates": 0,
            "target_ms": target_ms,
            "plan": plan,
            "margin": 1.5 if plan == "deadline" else None,
            "margin_correction": 1.0,
            "margin_samples": 0,
            "increment_samples": 0,
            "num_zero_prefill_steps": 0,
            "num_ttft_overdue_steps": 0,
            "num_deadline_steps": 0,
            "num_deadline_misses": 0,
        } | self.dlfp_state_overrides

    async def apply_dlfp_config(self, config: DLFPConfig) -> dict[str, Any]:
        await self._engine_core_call()
        if self.dlfp_failure is not None:
            raise self.dlfp_failure
        self.dlfp_config = config
        return await self.get_dlfp_state()

    async def get_dlfp_steps(self, since_step: int) -> list[dict[str, Any]]:
        return []

    async def reset_dlfp(self, *, model: bool = False) -> dict[str, Any]:
        self.num_dlfp_resets += 1
        self.last_reset_model = model
        return await self.get_dlfp_state()


class _FakeRequestStream(RequestStream):
    """The i-th token has id i; one in ``stop_token_ids`` ends the choice with "stop",
    unless fewer than ``min_tokens`` came before it. An abort lands in ``aborted``.

    Under a JSON-schema or JSON-object constraint the text is ``schema_instance``'s
    JSON, a few characters a token, ending with "stop" (cut at ``max_tokens`` with
    "length"), as a constrained model ends once the object closes."""

    def __init__(
        self, engine: FakeEngine, request_id: str, num_prompt: int, options: SamplingOptions
    ) -> None:
        super().__init__()
        self._engine = engine
        self._request_id = request_id
        self._num_prompt = num_prompt
        self._options = options
        self._i = 0
        self._json: list[str] | None = None
        if options.json_schema is not None or options.json_object:
            text = json.dumps(schema_instance(options.json_schema or {"type": "object"}))
            self._json = [text[k : k + 4] for k in range(0, len(text), 4)]

    async def first_output(self) -> bool:
        """The fake produces its first token ``delay_s`` after submission, read or not."""
        await asyncio.sleep(self._engine.delay_s)
        return not self._engine._dead and self._engine.fail_after_tokens != 0

    async def _next(self) -> GenerationChunk:
        engine, options, i = self._engine, self._options, self._i
        await asyncio.sleep(engine.delay_s)
        if engine._dead:
            raise EngineDeadError("fake engine died")
        if engine.fail_after_tokens is not None and i >= engine.fail_after_tokens:
            raise engine.failure
        self._i += 1
        if self._json is not None:
            stops = i == len(self._json) - 1
            word = self._json[i]
        else:
            stops = i in options.stop_token_ids and i >= options.min_tokens
            word = WORDS[i % len(WORDS)]
        last = stops or i == options.max_tokens - 1
        reason = "stop" if stops else "length"
        choices = [
            ChoiceDelta(
                index=k,
                text=word,
                token_ids=[i],
                logprobs=None
                if options.logprobs is None
                else [TokenLogprob(word, -0.5, ((word, -0.5),))],
                finish_reason=reason if last else None,
            )
            for k in range(options.n)
        ]
        return GenerationChunk(choices=choices, num_prompt_tokens=self._num_prompt, finished=last)

    def _release(self) -> None:
        self._engine.running.discard(self._request_id)

    async def _abort(self) -> None:
        self._engine.aborted.append(self._request_id)
