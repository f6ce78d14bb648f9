"""Does an observation misjudge a step when the scheduler runs ahead? A SIMULATION, no vLLM.

A replay of vLLM's engine-core loop around the prefill-cap controller.

Nothing here runs vLLM or measures real time. A fake clock, a simulated host
(time spent in ``schedule()`` and in ``update_from_output()``) and a simulated
device (time of one iteration, from its prefill tokens and decodes) replay the
order of events in ``EngineCore.step`` (``queue_depth=1``: schedule, execute,
complete) and ``EngineCore.step_with_batch_queue`` (``queue_depth=2``: step
k+1 is scheduled and dispatched before the engine blocks on step k).

The two knobs are the host time per step and the device's speed, so that one
replay covers the paper's host-bound case (a 0.6B model: the device finishes
a decode faster than the host can schedule the next step) and its
device-bound cases (8B, 32B: the device is the bottleneck).

What it cannot show:

- The device is one server running steps back to back; pipeline stages
  overlapping on different devices are not modelled.
- A constant set of streams decodes in *every* step (vLLM's ``AsyncScheduler``
  with its output placeholders). So a stream's gap between two tokens is, by
  construction, the completion-to-completion interval plus a constant; only a
  real engine can say whether the two agree (see ``bench/studies/observation_study.py``).
- Host time is constant; real host time grows with the batch and jitters.

Run ``python -m bench.studies.dispatch_sim`` for the table over host times and plants.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
from collections import deque
from dataclasses import dataclass, field, replace
from functools import cached_property

from bench.lib.plant import ContextPlant
from bench.lib.sim_clock import SimulatedClock
from engine_worker.contract.device_defaults import defaults_for
from engine_worker.controller.cap_controller import CapParams, PrefillCapController
from engine_worker.controller.cost_model import StepShape
from engine_worker.controller.modes import ControllerMode, Observation
from engine_worker.controller.sliding_window import quantile
from engine_worker.controller.step_timing import StepRecord

TARGET_MS = 80.0
PARAMS = replace(
    defaults_for("cuda").dlfp.to_params(),
    controller=ControllerMode.DLFP,
    target_ms=TARGET_MS,
    feedforward=False,
    observation=Observation.BUSY,
)
"""The CUDA defaults, with the paper's controller, its 80 ms target and no feed-forward."""
HORIZON_S = 120.0
NUM_DECODING = 4
UNCAPPED_BUDGET_TOKENS = defaults_for("cuda").max_num_batched_tokens


@dataclass(frozen=True)
class Plant:
    """SIMULATED host and device."""

    name: str
    host_ms: float
    """Fixed host time per step: half in ``schedule()``, half in ``update_from_output()``."""
    host_us_per_token: float
    """Host time per prefill token, spent preparing the step before it is dispatched."""
    decode_ms: float
    """Device time of an iteration with no prefill."""
    prefill_us_per_token: float
    """Device time per prefill token."""

    @cached_property
    def device(self) -> ContextPlant:
        """The device's step time: ``decode_ms``, 0.5 ms a decode, the prefill tokens' time."""
        return ContextPlant(
            base_s=self.decode_ms / 1000,
            decode_s=0.0005,
            prefill_s_per_token=self.prefill_us_per_token * 1e-6,
            attention_s_per_token2=0.0,
            noise=0.0,
        )

    def device_s(self, num_prefill_tokens: int, num_decoding: int) -> float:
        shape = StepShape(num_decode_tokens=num_decoding, num_prefill_tokens=num_prefill_tokens)
        return self.device.exact_s(shape)

    def dispatch_host_s(self, num_prefill_tokens: int) -> float:
        return self.host_ms / 2000 + self.host_us_per_token * 1e-6 * num_prefill_tokens

    def with_host(self, host_ms: float) -> Plant:
        return replace(self, host_ms=host_ms)


SMALL = Plant(
    "host-bound (0.6B-like)",
    host_ms=2.0,
    host_us_per_token=20.0,
    decode_ms=4.0,
    prefill_us_per_token=5.0,
)
"""The host prepares a step for longer than the device runs it."""
LARGE = Plant(
    "device-bound (8B/32B-like)",
    host_ms=2.0,
    host_us_per_token=2.0,
    decode_ms=10.0,
    prefill_us_per_token=25.0,
)
"""The device runs a step for longer than the host prepares it."""


def simulated_arrivals(seed: int = 801, rate: float = 1.0) -> list[tuple[float, int]]:
    """Poisson arrivals, prompts of 2,000 to 5,000 tokens."""
    rng = random.Random(seed)
    arrivals: list[tuple[float, int]] = []
    now_s = 0.0
    while now_s < HORIZON_S:
        now_s += rng.expovariate(rate)
        arrivals.append((now_s, rng.randrange(2000, 5000)))
    return arrivals


@dataclass
class Completed:
    record: StepRecord
    device_s: float
    """SIMULATED device time of the step."""
    visible_s: float
    """When the step's tokens reach the streams (after ``update_from_output``)."""


@dataclass
class SimulatedEngine:
    """SIMULATION of the engine-core loop around a controller (no vLLM)."""

    controller: PrefillCapController
    clock: SimulatedClock
    queue_depth: int
    plant: Plant
    device_free_at_s: float = 0.0
    in_flight: deque[tuple[float, StepRecord, float]] = field(default_factory=deque)
    backlog_tokens: deque[int] = field(default_factory=deque)
    completed: list[Completed] = field(default_factory=list)

    def run(self, arrivals: list[tuple[float, int]]) -> None:
        pending = deque(arrivals)
        while self.clock.now < HORIZON_S:
            while pending and pending[0][0] <= self.clock.now:
                self.backlog_tokens.append(pending.popleft()[1])
            self._schedule_and_dispatch()
            if len(self.in_flight) < self.queue_depth:
                continue  # the batch queue has room: don't block yet
            self._complete_oldest()

    def _schedule_and_dispatch(self) -> None:
        cap = self.controller.on_schedule(NUM_DECODING)
        num_prefill = self._take_prefill(UNCAPPED_BUDGET_TOKENS if cap is None else cap)
        self.clock.now += self.plant.dispatch_host_s(num_prefill)
        record = self.controller.on_scheduled(num_prefill, NUM_DECODING)
        device_s = self.plant.device_s(num_prefill, NUM_DECODING)
        self.device_free_at_s = max(self.clock.now, self.device_free_at_s) + device_s
        self.in_flight.append((self.device_free_at_s, record, device_s))

    def _complete_oldest(self) -> None:
        done_at_s, record, device_s = self.in_flight.popleft()
        self.clock.now = max(self.clock.now, done_at_s)  # future.result() blocks
        self.controller.on_step_done()
        self.clock.now += self.plant.host_ms / 2000
        self.completed.append(Completed(record, device_s, self.clock.now))

    def _take_prefill(self, max_tokens: int) -> int:
        if not self.backlog_tokens:
            return 0
        num_tokens = min(self.backlog_tokens[0], max_tokens)
        self.backlog_tokens[0] -= num_tokens
        if self.backlog_tokens[0] == 0:
            self.backlog_tokens.popleft()
        return num_tokens


@dataclass(frozen=True)
class SimulationResult:
    """One replay's figures. Its percentiles are values seen, by rank: the smallest with
    more than the share at or below it (``quantile(..., strictly_above=True)``)."""

    p50_gap_ms: float
    p95_gap_ms: float
    """Stream gap ending at a mixed step (second half of the run)."""
    p95_device_ms: float
    """SIMULATED device time of mixed steps (second half)."""
    mean_cap_tokens: float
    """Mean cap of the mixed steps (second half)."""
    share_at_floor: float
    """Share of mixed steps capped at ``min_cap_tokens`` (second half)."""
    prefill_tokens_per_s: float
    final_cap_tokens: int
    num_updates: int
    num_misjudged_updates: int
    """Updates fed an observation under the target for a step whose gap was over it."""
    num_stale_observations: int


def simulate(
    mode: str,
    queue_depth: int,
    plant: Plant = SMALL,
    observation: str = "busy",
    params: CapParams = PARAMS,
) -> SimulationResult:
    clock = SimulatedClock()
    controller = PrefillCapController(
        replace(params, controller=ControllerMode(mode), observation=Observation(observation)),
        clock=clock,
        wall_clock=clock,
    )
    engine = SimulatedEngine(controller, clock, queue_depth, plant)
    engine.run(simulated_arrivals())
    gaps: list[tuple[Completed, float]] = []
    for previous, current in itertools.pairwise(engine.completed):
        gaps.append((current, current.visible_s - previous.visible_s))
    late = [
        (c, gap)
        for c, gap in gaps
        if c.record.is_mixed and c.record.dispatched_at_s > HORIZON_S / 2
    ]
    target_s = (params.set_target_ms or TARGET_MS) / 1000  # the simulation sets a target
    misjudged = [
        c
        for c, gap in gaps
        if c.record.is_feedback and (c.record.observation_s() or 0.0) < target_s < gap
    ]
    caps = [float(c.record.cap_tokens or 0) for c, _ in late]
    gaps_ms = sorted(gap * 1000 for _, gap in late)
    device_ms = sorted(c.device_s * 1000 for c, _ in late)
    prefill = sum(c.record.num_prefill_tokens for c in engine.completed)
    state = controller.state
    assert state.cap_tokens is not None
    return SimulationResult(
        p50_gap_ms=quantile(gaps_ms, 0.50, strictly_above=True),
        p95_gap_ms=quantile(gaps_ms, 0.95, strictly_above=True),
        p95_device_ms=quantile(device_ms, 0.95, strictly_above=True),
        mean_cap_tokens=statistics.fmean(caps),
        share_at_floor=sum(cap <= params.min_cap_tokens for cap in caps) / len(caps),
        prefill_tokens_per_s=prefill / clock.now,
        final_cap_tokens=state.cap_tokens,
        num_updates=state.num_updates,
        num_misjudged_updates=len(misjudged),
        num_stale_observations=state.num_stale_observations,
    )


ARMS = (
    ("dlfp", "busy"),
    ("dlfp-ct", "busy"),
    ("dlfp-ct", "completion"),
    ("dlfp-ct", "max"),
)
HOST_MS = (1.0, 5.0, 10.0, 20.0, 35.0, 50.0)


def table(host_ms: tuple[float, ...] = HOST_MS) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for plant in (SMALL, LARGE):
        for depth in (1, 2):
            for host in host_ms:
                for mode, observation in ARMS:
                    result = simulate(mode, depth, plant.with_host(host), observation)
                    rows.append(
                        {
                            "plant": plant.name,
                            "queue_depth": depth,
                            "host_ms": host,
                            "arm": mode if mode == "dlfp" else f"{mode}/{observation}",
                            **result.__dict__,
                        }
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host-ms", type=float, nargs="*", default=list(HOST_MS))
    args = parser.parse_args()
    print(
        f"SIMULATION, target {TARGET_MS:g} ms, {NUM_DECODING} streams decoding in every step\n"
        "| plant | depth | host ms | arm | gap P50 | gap P95 | device P95 | mean cap | "
        "at floor | prefill tok/s | misjudged |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for row in table(tuple(args.host_ms)):
        print(
            f"| {row['plant']} | {row['queue_depth']} | {row['host_ms']:g} | {row['arm']} | "
            f"{row['p50_gap_ms']:.1f} | {row['p95_gap_ms']:.1f} | {row['p95_device_ms']:.1f} | "
            f"{row['mean_cap_tokens']:.0f} | {row['share_at_floor']:.0%} | "
            f"{row['prefill_tokens_per_s']:.0f} | {row['num_misjudged_updates']} |"
        )


if __name__ == "__main__":
    main()
