"""Counting prompt tokens: a local tokenizer when one loads, else ~4 characters per token."""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Protocol


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class CharCounter:
    """The no-tokenizer estimate: one token per ``chars_per_token`` characters."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.chars_per_token = chars_per_token
        self.name = f"~{chars_per_token:g} chars/token"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


class TokenizerCounter:
    """A Hugging Face tokenizer, counting no special tokens (a chat template adds its own)."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self._tokenizer = tokenizer
        self.name = name

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))


def load_counter(tokenizer_dir: str | None) -> TokenCounter:
    """The tokenizer in ``tokenizer_dir`` (local files only), or the character estimate."""
    if not tokenizer_dir:
        return CharCounter()
    # NOTE: never reach for the Hub: the machine may have no network, and a
    # benchmark must not depend on what a download returns today.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    except Exception as exc:  # any load failure falls back, loudly
        print(
            f"bench: cannot load tokenizer {tokenizer_dir!r} ({exc}); counting ~4 chars/token",
            file=sys.stderr,
        )
        return CharCounter()
    return TokenizerCounter(tokenizer, f"tokenizer {tokenizer_dir}")
