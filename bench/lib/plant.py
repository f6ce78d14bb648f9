"""A SIMULATED step-time model (a toy plant): a step's time from its composition.

What drives the controller where no engine runs: the controller's tests, the in-process
scheduler benchmark (``bench/harness/overhead.py``) and the studies. The defaults have the
shape measured on the CPU engine: a decode-only step of 30 ms plus 2 ms a decode, about
1.4 ms a prefill token, plus attention that grows with the context a chunk attends to (a
128-token chunk went from 219 ms at the start of a long prompt to 311 ms near its end).
``speed`` divides every time: 0.5 is a machine twice as slow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from engine_worker.controller.cost_model import StepShape


@dataclass
class ContextPlant:
    """Time of a step, in seconds, from its composition (uniform noise of ``noise``)."""

    base_s: float = 0.030
    decode_s: float = 0.0016
    prefill_s_per_token: float = 0.0014
    attention_s_per_token2: float = 2.5e-7
    noise: float = 0.03
    speed: float = 1.0

    def exact_s(self, shape: StepShape) -> float:
        return (
            self.base_s
            + self.decode_s * shape.num_decode_tokens
            + self.prefill_s_per_token * shape.num_prefill_tokens
            + self.attention_s_per_token2 * shape.attention_tokens2
        ) / self.speed

    def busy_s(self, shape: StepShape, rng: random.Random) -> float:
        return self.exact_s(shape) * (1 + rng.uniform(-self.noise, self.noise))
