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
from dataclasses import dataclass, field

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


@dataclass
class DriftingPlant:
    """A SIMULATED CPU that can fail a controller: noise, outliers in bursts, a drifting speed.

    Calibrated to the slow CPU the controller starved on (an AMD EPYC family 23 model 1,
    AVX2, float32): a decode-only step of ``90 + 11 n`` ms for ``n`` decodes, about 9 ms a
    prefill token, lognormal noise of ``sigma``, outliers of 2-7x at a rate of
    ``outlier_rate`` in bursts of ``burst`` steps, and a slowness that ramps from 1.0 to
    ``peak_slowness`` and back over ``drift_steps`` steps starting at ``drift_start``. A step
    that carries prefill pays ``mixed_s`` more (a CPU's mixed-batch path, which no increment
    per token describes). ``step_s`` is called once a step, in order: the bursts and the
    drift follow the calls.
    """

    work: ContextPlant = field(
        default_factory=lambda: ContextPlant(
            base_s=0.090, decode_s=0.011, prefill_s_per_token=0.009, attention_s_per_token2=1e-6
        )
    )
    """The step's time at a slowness of 1 (``ContextPlant.exact_s``; its noise unused)."""
    sigma: float = 0.05
    outlier_rate: float = 0.005
    burst: int = 3
    peak_slowness: float = 1.6
    drift_start: int = 400
    drift_steps: int = 300
    mixed_s: float = 0.0
    num_steps: int = 0
    burst_left: int = 0

    def slowness(self, step: int) -> float:
        """1.0, up to ``peak_slowness`` over the first third, held, and back over the last."""
        third = self.drift_steps / 3
        into = step - self.drift_start
        if into <= 0 or into >= self.drift_steps:
            return 1.0
        rise = self.peak_slowness - 1.0
        if into < third:
            return 1.0 + rise * into / third
        if into < 2 * third:
            return self.peak_slowness
        return self.peak_slowness - rise * (into - 2 * third) / third

    def exact_s(self, shape: StepShape, step: int | None = None) -> float:
        """The step's time without noise or outliers, at ``step``'s slowness."""
        mixed_s = self.mixed_s if shape.num_prefill_tokens else 0.0
        return (self.work.exact_s(shape) + mixed_s) * self.slowness(
            self.num_steps if step is None else step
        )

    def step_s(self, shape: StepShape, rng: random.Random) -> float:
        """The next step's time: noise, and an outlier now and then."""
        seconds = self.exact_s(shape) * rng.lognormvariate(0.0, self.sigma)
        if self.burst_left == 0 and rng.random() < self.outlier_rate / self.burst:
            self.burst_left = self.burst
        if self.burst_left:
            self.burst_left -= 1
            seconds *= rng.uniform(2.0, 7.0)
        self.num_steps += 1
        return seconds
