"""Pipeline stages on the CPU backend: the one buffer vLLM 0.32 forgets to make.

A later pipeline stage receives the previous stage's activations into
``GPUModelRunner.intermediate_tensors``, a buffer made only by ``_dummy_run``.
On CPU with ``enforce_eager`` (the gateway's CPU default) the warm-up that
would call it is skipped (``CPUModelRunner.warming_up_model`` returns at once
for ``CompilationMode.NONE``), and the first real step fails in
``sync_and_gather_intermediate_tensors`` with ``assert
self.intermediate_tensors is not None``. ``allocate_intermediate_tensors`` makes
the buffer the way ``_dummy_run`` does; the engine calls it once, before
serving, through the worker extension (``worker_extension``).
"""

from __future__ import annotations

from typing import Any


def allocate_intermediate_tensors(runner: Any) -> bool:
    """Make a later stage's receive buffer on ``runner``; True if one was made."""
    from vllm.distributed.parallel_state import get_pp_group

    if get_pp_group().is_first_rank or runner.intermediate_tensors is not None:
        return False
    runner.intermediate_tensors = runner.model.make_empty_intermediate_tensors(
        batch_size=runner.max_num_tokens,
        dtype=runner.model_config.dtype,
        device=runner.device,
    )
    return True
