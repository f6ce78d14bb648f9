"""Templating and tokenizing in the gateway process, under one tokenizer lock.

``ChatTemplating`` renders a conversation with the model's chat template (or the one
the gateway was given), tokenizes prompts within a bound (``prompt_prefix``) and reads
the model's output back through vLLM's parsers (``output_parser``). The functions
below it fit the bound to the tokenizer.
"""

from __future__ import annotations

import threading
from typing import Any

from engine_worker.client.prompt_prefix import (
    Bound,
    Cut,
    class_bound,
    cut_before_space,
    encode_within,
    no_bound,
    piece_cut,
)
from engine_worker.contract.api import ChatOutput, InvalidRequestError, PromptTooLongError


class ChatTemplating:
    """The engine's chat template, tokenizer and output parsers (``VLLMEngine``'s part).

    NOTE: HF fast tokenizers are not safe to call from several threads at once (they
    may set truncation and padding state: "Already borrowed"): every use holds
    ``tokenizer_lock``.
    """

    spec: Any
    info: Any
    _tokenizer: Any
    _tokenizer_lock: threading.Lock
    _cut: Cut
    _bound: Bound
    _chat_template: str | None
    _parser_cls: Any
    _compact_json: bool

    def _require(self) -> Any:
        raise NotImplementedError

    def _prepare_chat(self, llm: Any) -> None:
        """Sampling defaults, the chat template and the output parsers, once at start."""
        from engine_worker.client.output_parser import parser_class

        model_config = llm.model_config
        structured = llm.vllm_config.structured_outputs_config
        self._compact_json = bool(getattr(structured, "disable_any_whitespace", False))
        self.info.root = self.spec.model
        self.info.sampling_defaults = dict(model_config.get_diff_sampling_param())
        if self.spec.chat_template is not None:
            self._chat_template = self.spec.chat_template.read_text()
        self._parser_cls = parser_class(
            self.spec.tool_call_parser,
            self.spec.reasoning_parser,
            self._tokenizer,
            self.spec.served_model_name,
        )

    def chat_output(self, request: dict[str, Any], prompt_token_ids: list[int]) -> ChatOutput:
        from engine_worker.client.output_parser import chat_output

        self._require()
        with self._tokenizer_lock:
            return chat_output(
                self._parser_cls, self._tokenizer, request, prompt_token_ids, self._compact_json
            )

    @property
    def tokenizer_lock(self) -> threading.Lock:
        return self._tokenizer_lock

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> list[int]:
        """Thread-safe (the gateway calls it off the event loop); InvalidRequestError
        for a conversation the model's template refuses. The template is applied whole
        (cheap beside BPE); ``max_tokens`` bounds the tokenizing, as in ``tokenize``."""
        from jinja2 import TemplateError

        from engine_worker.client.output_parser import template_messages

        self._require()
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        if self._chat_template is not None:
            extra["chat_template"] = self._chat_template
        try:
            with self._tokenizer_lock:
                text = self._tokenizer.apply_chat_template(
                    template_messages(messages),
                    add_generation_prompt=True,
                    tokenize=False,
                    **extra,
                )
                return encode_within(
                    text, max_tokens, self._encode_rendered, self._cut, self._bound
                )
        except PromptTooLongError:
            raise
        except (TemplateError, ValueError, TypeError, KeyError, RecursionError) as exc:
            # RecursionError: a value nested past what the template's JSON can write.
            raise InvalidRequestError(
                f"cannot render the conversation: {exc}", param="messages"
            ) from exc

    def _encode_rendered(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def tokenize(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Thread-safe; InvalidRequestError for text the tokenizer refuses (a lone
        surrogate raises TypeError in the Rust tokenizer); with ``max_tokens``, a text
        a prefix proves longer raises PromptTooLongError (``prompt_prefix``)."""
        self._require()
        try:
            with self._tokenizer_lock:
                return encode_within(text, max_tokens, self._encode, self._cut, self._bound)
        except PromptTooLongError:
            raise
        except (ValueError, TypeError) as exc:
            raise InvalidRequestError(f"cannot tokenize the prompt: {exc}", param="prompt") from exc

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text))


def _max_token_bytes(tokenizer: Any) -> int | None:
    """An upper bound on the text one token covers, in UTF-8 bytes: the longest
    vocabulary entry (a byte-level or SentencePiece entry is never shorter in UTF-8
    than the text it stands for). None if the vocabulary is not readable."""
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # not every tokenizer exposes it; then no early size check
        return None
    return max((len(str(entry).encode("utf-8")) for entry in vocab), default=None)


def prefix_cut(tokenizer: Any) -> Cut:
    """Where a prompt's prefix may be cut (``prompt_prefix``): at the tokenizer's own
    pieces where a fast tokenizer has a pre-tokenizer and no normalizer, else at spaces."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pre = getattr(backend, "pre_tokenizer", None)
    if pre is None or getattr(backend, "normalizer", None) is not None:
        return cut_before_space
    return piece_cut(pre.pre_tokenize_str)


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's map from bytes to printable characters, inverted: the character a
    byte-level BPE vocabulary writes for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    chars = {chr(b): b for b in printable}
    chars |= {chr(256 + i): b for i, b in enumerate(others)}
    return chars


def token_bound(tokenizer: Any) -> Bound:
    """``prompt_prefix.class_bound`` for a byte-level BPE tokenizer with no normalizer,
    whose tokens are runs of the text's own bytes; no bound for any other."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.normalizer is not None:
        return no_bound
    if "ByteLevel" not in str(backend.pre_tokenizer) or type(backend.model).__name__ != "BPE":
        return no_bound
    alphabet = _byte_level_alphabet()
    # Added tokens are matched as text, whatever characters they use; the model's own
    # vocabulary is written in the byte-level alphabet.
    added = [t.content for t in backend.get_added_tokens_decoder().values()]
    learnt = set(backend.get_vocab(with_added_tokens=False)) - set(added)
    texts = [token.encode("utf-8", "replace") for token in added]
    pieces = [_learnt_bytes(token, alphabet) for token in learnt]
    return class_bound([*texts, *pieces])


def _learnt_bytes(token: str, alphabet: dict[str, int]) -> bytes:
    """A learnt token's bytes; one written outside the byte-level alphabet is taken as
    UTF-8 text, which can only count more bytes of a class and so loosen the bound."""
    if all(c in alphabet for c in token):
        return bytes(alphabet[c] for c in token)
    return token.encode("utf-8", "replace")
