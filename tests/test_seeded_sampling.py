"""The seeded-sampling guard against a FAKE model runner (only the attributes the guard
reads) and real CPU ``torch.Generator``s: the real engine case is in
``tests/test_engine_robustness.py``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from engine_worker.worker.seeded_sampling import guarded


def fake_runner(generators: dict[int, torch.Generator], discard: list[bool]) -> Any:
    return SimpleNamespace(
        input_batch=SimpleNamespace(generators=generators, num_reqs=len(discard)),
        discard_request_mask=SimpleNamespace(np=np.array(discard + [False] * 4)),
    )


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_a_discarded_row_samples_without_its_generator_and_keeps_its_state() -> None:
    kept, discarded = seeded(1), seeded(2)
    runner = fake_runner({0: kept, 2: discarded}, [False, False, True])
    seen: list[set[int]] = []

    def sample_tokens() -> str:
        # What vLLM's sampler and bookkeeping see: no generator to wind back in row 2.
        seen.append(set(runner.input_batch.generators))
        for generator in runner.input_batch.generators.values():
            torch.rand(3, generator=generator)
        return "sampled"

    assert guarded(runner, sample_tokens)() == "sampled"
    assert seen == [{0}]
    assert runner.input_batch.generators == {0: kept, 2: discarded}
    # The discarded row's stream is as if the step had not drawn; the kept row's moved on.
    assert torch.equal(torch.rand(3, generator=discarded), torch.rand(3, generator=seeded(2)))
    assert not torch.equal(torch.rand(3, generator=kept), torch.rand(3, generator=seeded(1)))


def test_generators_go_back_when_sampling_fails() -> None:
    discarded = seeded(3)
    runner = fake_runner({1: discarded}, [False, True])

    def sample_tokens() -> None:
        torch.rand(5)  # the global generator: the row's own is out of the batch
        raise RuntimeError("worker failed")

    with pytest.raises(RuntimeError, match="worker failed"):
        guarded(runner, sample_tokens)()
    assert runner.input_batch.generators == {1: discarded}
