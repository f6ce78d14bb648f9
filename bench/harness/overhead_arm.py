"""One arm of ``bench overhead``: a scheduler kept in a steady state, step after step.

The arm's scheduler is vLLM's ``Scheduler`` or ``DLFPScheduler`` under one controller,
built in-process (``bench.harness.scheduler_factory``). A DLFP arm's controller reads a
SIMULATED clock that a plant (``bench.lib.plant``) advances between ``schedule()`` and
``update_from_output()``, so that the controller sees steps of tens of milliseconds, and
its cost model is fitted on the plant before the warm-up.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.plant import ContextPlant
from bench.lib.sim_clock import SimulatedClock
from engine_worker.contract.device_defaults import defaults_for
from engine_worker.controller.cost_model import StepShape, chunk_attention

BASELINE = "vllm"
ARMS = (BASELINE, "off", "dlfp", "dlfp-ct")
"""vLLM's ``Scheduler``, then ``DLFPScheduler`` under each controller."""
DECODE_PROMPT_TOKENS = 128
PLANT_S_PER_DECODE = 0.5e-3
PLANT_S_PER_PREFILL_TOKEN = 0.5e-3
PLANT_NOISE = 0.05
"""The plant: lone decode + 0.5 ms a decode + 0.5 ms a prefill token, times lognormal noise."""
NUM_PREFIT_STEPS = 48
PLANT_CLOCK_START_S = 1000.0


@dataclass(frozen=True)
class Settings:
    num_running: int = 32
    waiting: tuple[int, ...] = (0, 32, 256)
    policies: tuple[str, ...] = ("fcfs", "priority")
    num_steps: int = 2000
    """Timed steps per arm and cell."""
    num_warmup_steps: int = 200
    block_steps: int = 20
    prompt_tokens: int = 2000
    max_num_seqs: int = 64
    max_num_batched_tokens: int = defaults_for("cpu").max_num_batched_tokens
    lone_decode_ms: float = 42.0
    seed: int = 0

    @property
    def max_model_len(self) -> int:
        num_steps = self.num_warmup_steps + self.num_steps + self.block_steps + 64
        return max(self.prompt_tokens + 1, DECODE_PROMPT_TOKENS + num_steps)


def plant(settings: Settings) -> ContextPlant:
    """The step time the DLFP arms' clock follows, before its noise."""
    return ContextPlant(
        base_s=settings.lone_decode_ms / 1000.0,
        decode_s=PLANT_S_PER_DECODE,
        prefill_s_per_token=PLANT_S_PER_PREFILL_TOKEN,
        attention_s_per_token2=0.0,
        noise=0.0,
    )


def plant_s(model: ContextPlant, shape: StepShape, rng: random.Random) -> float:
    """One step's plant time: the plant's, times lognormal noise of ``PLANT_NOISE``."""
    return model.exact_s(shape) * math.exp(rng.gauss(0.0, PLANT_NOISE))


def build_scheduler(arm: str, policy: str, model_dir: Path, settings: Settings) -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler

    from bench.harness import scheduler_factory
    from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig
    from engine_worker.engine_core.scheduler import DLFPScheduler

    dlfp = None if arm == BASELINE else DLFPConfig(controller=ControllerMode(arm))
    max_model_len = settings.max_model_len
    blocks_per_request = -(-max_model_len // scheduler_factory.BLOCK_SIZE)
    return scheduler_factory.build_scheduler(
        model_dir,
        Scheduler if arm == BASELINE else DLFPScheduler,
        dlfp,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        num_blocks=(settings.max_num_seqs + 1) * blocks_per_request,
        policy=policy,
        max_num_seqs=settings.max_num_seqs,
        max_model_len=max_model_len,
    )


class ArmRun:
    """One arm's scheduler in one cell, kept in a steady state step after step."""

    def __init__(self, arm: str, scheduler: Any, num_waiting: int, settings: Settings) -> None:
        from bench.harness import scheduler_factory

        self.arm, self.scheduler, self.num_waiting = arm, scheduler, num_waiting
        self.settings = settings
        self.plant = plant(settings)
        self.clock = SimulatedClock(PLANT_CLOCK_START_S)
        self.rng = random.Random(settings.seed)
        self.plant_rng = random.Random(settings.seed + 1)
        self.decoder_ids: set[str] = set()
        self.num_added = 0
        self.step_ns: list[int] = []
        self.prefill_tokens: list[int] = []
        self.num_steps = self.num_capped_steps = self.num_planned_steps = 0
        self._factory = scheduler_factory
        if arm != BASELINE:
            from engine_worker.controller.cap_controller import PrefillCapController

            scheduler.dlfp_controller = PrefillCapController(
                scheduler.dlfp_params, clock=self.clock
            )
            self._prefit(scheduler.dlfp_controller)

    def _prefit(self, controller: Any) -> None:
        rng = random.Random(self.settings.seed + 2)
        for index in range(NUM_PREFIT_STEPS):
            num_decode = rng.randint(1, self.settings.num_running)
            num_prefill = 0 if index % 4 == 0 else rng.randrange(8, 1025, 8)
            start = rng.randrange(0, self.settings.prompt_tokens)
            shape = StepShape(
                num_decode_tokens=num_decode,
                decode_context_tokens=num_decode * rng.randrange(100, 3000),
                num_prefill_tokens=num_prefill,
                attention_tokens2=chunk_attention(start, num_prefill) if num_prefill else 0.0,
            )
            controller.observe_model(shape, plant_s(self.plant, shape, rng))

    def _add(self, num_prompt_tokens: int, max_tokens: int) -> str:
        request_id = f"{self.arm}-{self.num_added}"
        self.num_added += 1
        priority = self.rng.randint(0, 2)
        request = self._factory.make_request(request_id, num_prompt_tokens, max_tokens, priority)
        self.scheduler.add_request(request)
        return request_id

    def setup(self) -> None:
        """The decoding requests, past their prefill, then the waiting queue."""
        max_tokens = self.settings.max_model_len - DECODE_PROMPT_TOKENS
        for _ in range(self.settings.num_running):
            self.decoder_ids.add(self._add(DECODE_PROMPT_TOKENS, max_tokens))
        while any(r.is_prefill_chunk or not r.num_computed_tokens for r in self.decoders()):
            self.step(top_up=False)
        self._top_up()
        self.run(self.settings.num_warmup_steps)
        self.step_ns.clear()
        self.prefill_tokens.clear()
        self.num_capped_steps = self.num_planned_steps = 0

    def decoders(self) -> list[Any]:
        return [self.scheduler.requests[r] for r in self.decoder_ids]

    def num_decoding(self) -> int:
        """The decoding requests still running as decodes (none preempted)."""
        running = self.scheduler.running
        return sum(r.request_id in self.decoder_ids and not r.is_prefill_chunk for r in running)

    def _top_up(self) -> None:
        while len(self.scheduler.waiting) < self.num_waiting:
            self._add(self.settings.prompt_tokens, 1)

    def step(self, top_up: bool = True) -> None:
        scheduler = self.scheduler
        # NOTE: only schedule() and update_from_output() are timed: the model runner's
        # output depends on what was scheduled, so it is built between them.
        start = time.perf_counter_ns()
        output = scheduler.schedule()
        scheduled = time.perf_counter_ns()
        runner_output = self._factory.runner_output(scheduler, output)
        num_decode = sum(1 for r in output.num_scheduled_tokens if r in self.decoder_ids)
        num_prefill = output.total_num_scheduled_tokens - num_decode
        shape = StepShape(num_decode_tokens=num_decode, num_prefill_tokens=num_prefill)
        self.clock.advance(plant_s(self.plant, shape, self.plant_rng))
        built = time.perf_counter_ns()
        scheduler.update_from_output(output, runner_output)
        done = time.perf_counter_ns()
        self.step_ns.append(scheduled - start + done - built)
        self.prefill_tokens.append(num_prefill)
        self.num_steps += 1
        if top_up:
            self._top_up()

    def run(self, num_steps: int) -> None:
        """``num_steps`` steps; a DLFP arm also counts its capped and planned mixed steps."""
        # NOTE: not the controller's state: reading it refits the cost model, which would
        # spare the next step its refit. Its step index counts schedule() calls, as this does.
        since = self.num_steps
        for _ in range(num_steps):
            self.step()
        if self.arm != BASELINE:
            records = self.scheduler.dlfp_get_steps(since)
            mixed = [r for r in records if r["is_mixed"] and r["cap_tokens"] is not None]
            self.num_capped_steps += len(mixed)
            self.num_planned_steps += sum(r["is_planned"] for r in mixed)
