"""A prompt without spaces is refused after a bounded prefix, by the embedded model's own
tokenizer and its pre-tokenizer's pieces (engine tier: it needs the converted model)."""

from __future__ import annotations

import pytest

from engine_worker.client.embedded_model import ensure_embedded_model
from engine_worker.client.prompt_prefix import CHARS_PER_TOKEN, GROWTH, SLACK_TOKENS, encode_within
from engine_worker.client.templating import prefix_cut, token_bound
from engine_worker.contract.api import PromptTooLongError

pytestmark = pytest.mark.engine

MAX_TOKENS = 4095


def test_a_space_free_prompt_is_cut_at_the_tokenizers_pieces() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_model())
    encoded: list[int] = []

    def encode(text: str) -> list[int]:
        encoded.append(len(text))
        return list(tokenizer.encode(text, add_special_tokens=False))

    text = "東京、大阪。" * 60_000  # 360,000 characters, not one ASCII space
    with pytest.raises(PromptTooLongError):
        encode_within(text, MAX_TOKENS, encode, prefix_cut(tokenizer))
    # Prefixes only, never the whole text: the work is bounded by the context.
    first = (MAX_TOKENS + SLACK_TOKENS) * CHARS_PER_TOKEN
    assert encoded and max(encoded) <= first * GROWTH
    assert max(encoded) < len(text) // 4

    # The prefix's tokens are the whole text's first tokens.
    cut = prefix_cut(tokenizer)("東京、大阪。" * 10, 25)
    assert 0 < cut <= 25
    whole = tokenizer.encode("東京、大阪。" * 10, add_special_tokens=False)
    prefix = tokenizer.encode(("東京、大阪。" * 10)[:cut], add_special_tokens=False)
    assert whole[: len(prefix)] == prefix


def test_a_one_piece_prompt_is_refused_by_the_token_bound() -> None:
    """A run of CJK characters is one piece of the pre-tokenizer: no prefix can be cut,
    and the embedded model's vocabulary bounds its tokens from below instead."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_model())
    text = "字" * 133_000  # what bench abuse's space-free-prompts sends
    bound = token_bound(tokenizer)
    assert MAX_TOKENS < bound(text) <= len(tokenizer.encode(text, add_special_tokens=False))
    with pytest.raises(PromptTooLongError):
        encode_within(text, MAX_TOKENS, lambda t: pytest.fail("tokenized"), bound=bound)
