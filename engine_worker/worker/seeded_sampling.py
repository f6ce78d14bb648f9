"""A seeded request's random stream through the samples vLLM throws away, on the CPU.

While a prompt is prefilled in chunks, vLLM samples a token for it at every chunk and
discards all but the last. For a request with a ``seed`` it then winds the request's
``torch.Generator`` back (``gen.set_offset(gen.get_offset() - 4)`` in the model runner's
``_bookkeeping_sync``), so that the discarded draw costs the stream nothing. A CPU
generator has no offset: that call raises ``CPU Generator does not use offset``, the
worker fails, and the engine dies with every request on it. On the CPU backend a seeded
request whose prefill is chunked (a long prompt, a busy step budget, or a DLFP cap) is
enough.

The guard, installed on each CPU worker, takes the generators of the requests whose
sample will be discarded out of the batch for the length of ``sample_tokens`` and puts
them back with their state as it was: the discarded draws come from the global
generator, vLLM finds no generator to wind back, and the seeded stream is the same as if
the prompt had been prefilled at once, which is what the wind-back is for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

Held = dict[int, tuple[Any, Any]]
"""Batch row -> (its generator, the generator's state before the step)."""


def install(model_runner: Any) -> None:
    """Wrap ``model_runner.sample_tokens`` with the guard (CPU workers only)."""
    model_runner.sample_tokens = guarded(model_runner, model_runner.sample_tokens)


def guarded(model_runner: Any, sample_tokens: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(sample_tokens)
    def sample(*args: Any, **kwargs: Any) -> Any:
        held = hold_discarded(model_runner)
        try:
            return sample_tokens(*args, **kwargs)
        finally:
            restore(model_runner, held)

    return sample


def hold_discarded(model_runner: Any) -> Held:
    """Take out the generators of the rows whose sample this step discards."""
    generators: dict[int, Any] = model_runner.input_batch.generators
    if not generators:
        return {}
    num_reqs = int(model_runner.input_batch.num_reqs)
    discarded = np.nonzero(model_runner.discard_request_mask.np[:num_reqs])[0]
    held: Held = {}
    for row in discarded.tolist():  # Python ints, as the dict's keys
        generator = generators.pop(row, None)
        if generator is not None:
            held[row] = (generator, generator.get_state())
    return held


def restore(model_runner: Any, held: Held) -> None:
    """Put each generator back in its row, in the state it had before the step."""
    for row, (generator, state) in held.items():
        generator.set_state(state)
        model_runner.input_batch.generators[row] = generator
