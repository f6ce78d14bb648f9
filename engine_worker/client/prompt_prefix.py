"""Proving a prompt too long from a prefix of it, before tokenizing all of it.

A 900 KB prompt tokenized whole holds the tokenizer (one lock for every request) for
half a second, though a context of a few thousand tokens cannot take it. ``encode_within``
first tokenizes prefixes, from ``CHARS_PER_TOKEN`` characters per token of the limit
and growing fourfold, and refuses the prompt as soon as one prefix alone has more
than ``max_tokens + SLACK_TOKENS`` tokens; a text no prefix proves too long is then
tokenized whole, as it would have been.

Why no prompt that fits is refused: each prefix ends just before a space (U+0020)
that follows a character other than whitespace. The pre-tokenizers of byte-level
BPE (GPT-2's, Llama 3's and Qwen's split patterns) never put such a space in the
same piece as the character before it (a space only ever begins a piece), and
SentencePiece models split by whitespace have no piece in which a ``▁`` follows
another character than ``▁``. So the prefix's pieces are exactly the whole text's
first pieces, each tokenized alone: the prefix's tokens are the whole text's first
tokens, never more (a BOS or EOS the tokenizer adds, it adds to both). The slack
leaves room for a tokenizer outside these families whose last piece of the prefix
merges differently (an added token with a space in it, cut in two).

Text with no such space (Chinese or Japanese prose, or one long run of letters) has
no such cut. Where the tokenizer's own pre-tokenizer is known and no normalizer
rewrites the text first, ``piece_cut`` cuts it instead at the start of the last piece
the pre-tokenizer finds in the prefix: every piece before it is one of the whole
text's (the split is left to right, and only the last piece of a prefix can differ),
so the same argument holds.

Text the pre-tokenizer leaves in one piece (a run of letters or of CJK characters) has
no cut at all; for it ``class_bound`` gives a lower bound on the tokens without
tokenizing: where every token is a run of the text's own bytes (byte-level BPE, no
normalizer), a text with ``n`` bytes of a class (letters, digits, non-ASCII) has at least
``n / m`` tokens, ``m`` being the most bytes of that class any token of the vocabulary
holds. ``encode_within`` refuses a text that bound proves too long before any prefix.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable

from engine_worker.contract.api import PromptTooLongError

CHARS_PER_TOKEN = 8
"""The first prefix's characters per token of the limit: twice what English averages,
so a prompt past the context is caught by the first prefix."""
SLACK_TOKENS = 32
"""Tokens the prefix may have beyond the whole text's (0 for the families above)."""
GROWTH = 4
"""Each prefix is this many times longer than the one before: the prefixes of a
prompt then cost at most a third more than tokenizing the last of them."""

# Searched in the reversed text: a space whose preceding character is not whitespace.
_CUT_REVERSED = re.compile(r" (?=\S)")


def cut_before_space(text: str, size: int) -> int:
    """The longest prefix of at most ``size`` characters that ends just before a space
    following a character other than whitespace; 0 if there is none."""
    found = _CUT_REVERSED.search(text[size::-1])
    return 0 if found is None else size - found.start()


Cut = Callable[[str, int], int]
"""``cut(text, size)``: a prefix length of at most ``size`` whose tokens are the whole
text's first tokens; 0 for none."""


Bound = Callable[[str], int]
"""``bound(text)``: a number of tokens the text has at least."""

BYTE_CLASSES = (
    string.ascii_letters.encode(),
    string.digits.encode(),
    bytes(range(0x80, 0x100)),
)
"""Byte classes counted by ``class_bound``: their tokens are short in every vocabulary,
unlike runs of spaces or punctuation (a token of 80 ``#``)."""


def no_bound(text: str) -> int:
    return 0


def _num_in(data: bytes, byte_class: bytes) -> int:
    return len(data) - len(data.translate(None, byte_class))


def class_bound(tokens: Iterable[bytes]) -> Bound:
    """The lower bound above, from the bytes of every token of the vocabulary; sound only
    for a tokenizer whose tokens are runs of the text's own bytes."""
    most = [1] * len(BYTE_CLASSES)
    for token in tokens:
        for i, byte_class in enumerate(BYTE_CLASSES):
            most[i] = max(most[i], _num_in(token, byte_class))

    def bound(text: str) -> int:
        data = text.encode("utf-8", "replace")
        return max(-(-_num_in(data, c) // m) for c, m in zip(BYTE_CLASSES, most, strict=True))

    return bound


def piece_cut(pre_tokenize: Callable[[str], list[tuple[str, tuple[int, int]]]]) -> Cut:
    """A cut at a space, or else at the start of the last piece the pre-tokenizer (the
    Hugging Face ``pre_tokenize_str``: pieces with their character offsets) finds in the
    prefix."""

    def cut(text: str, size: int) -> int:
        at_space = cut_before_space(text, size)
        if at_space >= size // 2:
            return at_space  # long enough: spare the pre-tokenizer, which holds the GIL
        pieces = pre_tokenize(text[:size])
        at_piece = pieces[-1][1][0] if len(pieces) >= 2 else 0
        return max(at_space, at_piece)

    return cut


def encode_within(
    text: str,
    max_tokens: int | None,
    encode: Callable[[str], list[int]],
    cut: Cut = cut_before_space,
    bound: Bound = no_bound,
) -> list[int]:
    """``encode(text)``, unless ``bound`` or a prefix already proves more than
    ``max_tokens`` (+ slack, for a prefix) tokens: then PromptTooLongError, with the
    number of tokens the whole text has at least."""
    if max_tokens is not None:
        num_at_least = bound(text)
        if num_at_least > max_tokens:
            raise PromptTooLongError(num_at_least, max_tokens)
        size = (max_tokens + SLACK_TOKENS) * CHARS_PER_TOKEN
        while size < len(text):
            cut_at = cut(text, size)
            if cut_at > 0:
                num_at_least = len(encode(text[:cut_at])) - SLACK_TOKENS
                if num_at_least > max_tokens:
                    raise PromptTooLongError(num_at_least, max_tokens)
            size *= GROWTH
    return encode(text)
