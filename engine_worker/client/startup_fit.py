"""The cost model fitted before the first request: real short requests through ``AsyncLLM``.

vLLM's own warm-up runs (``profile_run``, dummy batches) call the model runner directly and
never pass through the scheduler, so the DLFP controller learns nothing from them. Here the
engine serves a small workload of its own before ``/ready`` turns 200: a few decode
streams (their number grows from one to ``MAX_DECODES``), and beside them one prompt at a
time with sizes from ``PROMPT_SIZES``, so the fit sees mixed steps of several prefill sizes
and contexts (a prompt over the cap is chunked, so its later chunks carry context) and
decode-only steps between them. Every step feeds the cost model, whatever the controller's
mode. Prompts are random token ids, so the prefix cache cannot serve them.

The workload stops at the time budget (``startup_fit_s``); the requests are then aborted
and the controller reset with its model kept. The requests never reach the gateway's
request path, so its client metrics do not count them (vLLM's own ``vllm:*`` metrics do).
The fit is logged once, as event ``cost_model_fit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger("dlfp.engine")

PROMPT_SIZES: tuple[int, ...] = (16, 64, 256, 32, 128, 512, 48, 192, 1024, 96, 384, 768)
"""Prompt lengths in tokens, in the order they are sent (cycled until the budget ends)."""
MAX_DECODES = 4
"""Decode streams at most; one more starts after every ``PROMPTS_PER_DECODE`` prompts."""
PROMPTS_PER_DECODE = 3
DECODE_PROMPT_TOKENS = 8
REQUEST_PREFIX = "dlfp-startup-fit-"


def prompt_sizes(max_prompt_tokens: int) -> Iterator[int]:
    """``PROMPT_SIZES`` cycled without end, each clamped into ``[1, max_prompt_tokens]``."""
    while True:
        for size in PROMPT_SIZES:
            yield max(1, min(size, max_prompt_tokens))


async def run_startup_fit(
    llm: Any, channel: Any, *, budget_s: float, max_model_len: int, seed: int = 0
) -> dict[str, Any]:
    """Serve the fit workload for ``budget_s`` seconds; returns the controller's state after
    the reset (the fitted model kept). ``llm`` is vLLM's ``AsyncLLM``, ``channel`` the
    gateway's ``DLFPChannel`` to its scheduler."""
    from vllm import SamplingParams

    rng = random.Random(seed)
    vocab = min(len(llm.get_tokenizer()), llm.model_config.get_vocab_size())
    low = min(100, vocab // 2)  # keep clear of the special tokens at the start of the vocabulary

    def token_ids(n: int) -> list[int]:
        return [rng.randrange(low, vocab) for _ in range(n)]

    before = await channel.get_state()
    started = time.monotonic()
    deadline = started + budget_s
    decode_tokens = max(1, max_model_len - DECODE_PROMPT_TOKENS - 1)
    decode_params = SamplingParams(max_tokens=decode_tokens, ignore_eos=True, temperature=0.0)
    prompt_params = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    decodes: list[asyncio.Task[None]] = []
    ids: list[str] = []

    async def drain(request_id: str, prompt: list[int], params: Any) -> None:
        ids.append(request_id)
        async for _ in llm.generate({"prompt_token_ids": prompt}, params, request_id):
            pass

    num_prompts = 0
    num_prompt_tokens = 0
    try:
        sizes = prompt_sizes(max_model_len - 2)
        while time.monotonic() < deadline:
            if len(decodes) < MAX_DECODES and num_prompts >= PROMPTS_PER_DECODE * len(decodes):
                request_id = f"{REQUEST_PREFIX}decode-{len(decodes)}"
                prompt = token_ids(DECODE_PROMPT_TOKENS)
                decodes.append(asyncio.create_task(drain(request_id, prompt, decode_params)))
            size = next(sizes)
            request_id = f"{REQUEST_PREFIX}prompt-{num_prompts}"
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await drain(request_id, token_ids(size), prompt_params)
                    num_prompts += 1
                    num_prompt_tokens += size
    finally:
        for task in decodes:
            task.cancel()
        await asyncio.gather(*decodes, return_exceptions=True)
        await llm.abort(ids)
    fitted = await channel.get_state()
    state: dict[str, Any] = await channel.reset(False)
    logger.info(
        "cost model fitted at start",
        extra={
            "event": "cost_model_fit",
            "seconds": round(time.monotonic() - started, 3),
            "steps": _count(fitted, before, "num_steps"),
            "mixed_steps": _count(fitted, before, "num_mixed_steps"),
            "prompts": num_prompts,
            "prompt_tokens": num_prompt_tokens,
            "ready": fitted.get("cost_model_ready"),
            "coefficients": fitted.get("cost_coefficients"),
        },
    )
    return state


def _count(after: dict[str, Any], before: dict[str, Any], key: str) -> int:
    return int(after.get(key) or 0) - int(before.get(key) or 0)
