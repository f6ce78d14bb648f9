"""The prefill-cap controller against a toy plant, on a fake clock (no vLLM, no sleeping).

The plant is a linear iteration-time model, ``iteration_s = a + b * prefill_tokens``,
like simple-pid's water boiler: enough to check the control law, its limits and
its guards, not a performance claim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest

from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig
from engine_worker.controller.cap_controller import CapParams, ControllerState, PrefillCapController
from tests.cap_params import cap_params
from tests.fake_clock import FakeClock

TARGET_MS = 200.0
PARAMS = cap_params(
    target_ms=TARGET_MS,
    initial_cap_tokens=128,
    min_cap_tokens=16,
    step_tokens=16,
    fixed_cap_tokens=64,
    feedforward=False,
    observation="busy",
)


@dataclass
class ToyPlant:
    """Iteration time of a step with ``prefill_tokens`` beside the decodes."""

    a_s: float = 0.020
    b_s_per_token: float = 0.0005

    def iteration_s(self, prefill_tokens: int) -> float:
        return self.a_s + self.b_s_per_token * prefill_tokens

    def tokens_at(self, target_ms: float) -> float:
        return (target_ms / 1000.0 - self.a_s) / self.b_s_per_token


def make_controller(params: CapParams = PARAMS) -> tuple[PrefillCapController, FakeClock]:
    clock = FakeClock(1000.0)
    return PrefillCapController(params, clock=clock, wall_clock=clock), clock


def run_sync_steps(
    controller: PrefillCapController,
    clock: FakeClock,
    plant: ToyPlant,
    num_steps: int,
    num_decoding: int = 2,
    prefill_backlog_tokens: int = 10**9,
) -> list[int | None]:
    """Synchronous engine loop (schedule, execute, complete); returns the caps applied."""
    caps: list[int | None] = []
    for _ in range(num_steps):
        cap = controller.on_schedule(num_decoding)
        prefill = min(prefill_backlog_tokens, 10**6 if cap is None else cap)
        controller.on_scheduled(prefill, num_decoding)
        clock.advance(plant.iteration_s(prefill))
        controller.on_step_done()
        caps.append(cap)
    return caps


@pytest.mark.parametrize("mode", ["dlfp", "dlfp-ct"])
def test_converges_to_target(mode: str) -> None:
    controller, clock = make_controller(replace(PARAMS, controller=mode))
    plant = ToyPlant()
    run_sync_steps(controller, clock, plant, num_steps=60)
    cap = controller.state.cap_tokens
    assert cap is not None
    # Within one quantum of the exact answer (360 tokens for this plant).
    assert abs(cap - plant.tokens_at(TARGET_MS)) <= PARAMS.step_tokens
    assert abs(plant.iteration_s(cap) * 1000 - TARGET_MS) / TARGET_MS < 0.05


def test_moves_the_right_way() -> None:
    controller, clock = make_controller()
    slow = ToyPlant(a_s=0.5)  # every step is over the target
    run_sync_steps(controller, clock, slow, num_steps=1)
    assert controller.state.cap_tokens is not None and controller.state.cap_tokens < 128
    controller.reset()
    fast = ToyPlant(b_s_per_token=1e-6)
    run_sync_steps(controller, clock, fast, num_steps=1)
    assert controller.state.cap_tokens is not None and controller.state.cap_tokens > 128


def test_never_leaves_bounds_and_always_a_multiple_of_step() -> None:
    rng = random.Random(7)
    controller, clock = make_controller()
    for _ in range(300):
        plant = ToyPlant(a_s=rng.uniform(0.0, 0.4), b_s_per_token=rng.uniform(1e-6, 5e-3))
        for cap in run_sync_steps(controller, clock, plant, num_steps=3):
            assert cap is not None
            assert PARAMS.min_cap_tokens <= cap <= PARAMS.max_cap_tokens
            assert cap % PARAMS.step_tokens == 0


def test_limits_stop_windup() -> None:
    controller, clock = make_controller()
    run_sync_steps(controller, clock, ToyPlant(b_s_per_token=1e-7), num_steps=200)
    assert controller.state.cap_tokens == PARAMS.max_cap_tokens
    # One slow step after 200 steps pinned at the limit already brings it down.
    run_sync_steps(controller, clock, ToyPlant(a_s=0.3), num_steps=1)
    cap = controller.state.cap_tokens
    assert cap is not None and cap < PARAMS.max_cap_tokens


def test_holds_still_while_nothing_decodes() -> None:
    controller, clock = make_controller()
    caps = run_sync_steps(controller, clock, ToyPlant(a_s=0.5), num_steps=20, num_decoding=0)
    state = controller.state
    assert caps == [None] * 20
    assert state.cap_tokens == PARAMS.initial_cap_tokens
    assert state.num_updates == 0
    assert state.num_decode_free_steps == 20
    assert state.num_mixed_steps == 0


def test_decode_only_steps_do_not_update() -> None:
    controller, clock = make_controller()
    run_sync_steps(controller, clock, ToyPlant(a_s=0.5), num_steps=10, prefill_backlog_tokens=0)
    assert controller.state.num_updates == 0
    assert controller.state.cap_tokens == PARAMS.initial_cap_tokens


def test_partial_chunk_only_counts_when_slow() -> None:
    controller, clock = make_controller()
    # 10 prefill tokens under a cap of 128: fast, so it says nothing about the cap.
    run_sync_steps(controller, clock, ToyPlant(), num_steps=5, prefill_backlog_tokens=10)
    assert controller.state.num_updates == 0
    # The same partial chunk, slow: the cap must come down.
    run_sync_steps(controller, clock, ToyPlant(a_s=0.4), num_steps=1, prefill_backlog_tokens=10)
    cap = controller.state.cap_tokens
    assert controller.state.num_updates == 1 and cap is not None and cap < 128


def test_each_step_counts_for_the_cap_it_was_scheduled_with() -> None:
    controller, clock = make_controller()
    # Two steps in flight under cap 128 (a two-deep dispatch queue).
    assert controller.on_schedule(num_decoding=1) == 128
    controller.on_scheduled(num_prefill_tokens=128, num_decode_tokens=1)
    assert controller.on_schedule(num_decoding=1) == 128
    controller.on_scheduled(num_prefill_tokens=128, num_decode_tokens=1)
    clock.advance(0.4)  # twice the 200 ms target: gain 0.5 halves the cap it ran at
    first = controller.on_step_done()
    assert first is not None and first.is_feedback
    assert controller.state.cap_tokens == 64
    # The second step ran under 128 too, before the update: it counts, for 128, so the
    # cap is 128 halved again, not 64 halved (the paper's guard dropped it as stale).
    clock.advance(0.4)
    second = controller.on_step_done()
    assert second is not None and second.is_feedback
    state = controller.state
    assert (state.num_updates, state.num_stale_observations) == (2, 0)
    assert state.cap_tokens == 64


def test_reset_makes_in_flight_steps_stale() -> None:
    controller, clock = make_controller()
    controller.on_schedule(num_decoding=1)
    controller.on_scheduled(num_prefill_tokens=128, num_decode_tokens=1)
    controller.reset()
    clock.advance(0.4)
    controller.on_step_done()
    assert controller.state.num_updates == 0
    assert controller.state.cap_tokens == PARAMS.initial_cap_tokens


def test_interval_controller_attributes_interval_to_first_call() -> None:
    controller, clock = make_controller(replace(PARAMS, controller="dlfp"))
    controller.on_schedule(num_decoding=1)
    controller.on_scheduled(num_prefill_tokens=128, num_decode_tokens=1)
    clock.advance(0.4)
    done = controller.on_step_done()
    # dlfp observes nothing at completion, only at the next schedule() call.
    assert done is not None and controller.state.num_updates == 0
    clock.advance(0.1)
    controller.on_schedule(num_decoding=1)
    assert done.interval_s == pytest.approx(0.5) and done.is_feedback
    assert controller.state.last_observation_ms == pytest.approx(500.0)


def test_fixed_mode() -> None:
    controller, clock = make_controller(replace(PARAMS, controller="fixed"))
    caps = run_sync_steps(controller, clock, ToyPlant(a_s=0.5), num_steps=10)
    assert caps == [PARAMS.fixed_cap_tokens] * 10
    assert controller.on_schedule(num_decoding=0) is None
    assert controller.state.num_updates == 0
    assert controller.state.num_mixed_steps == 10


def test_off_mode() -> None:
    controller, clock = make_controller(replace(PARAMS, controller="off"))
    caps = run_sync_steps(controller, clock, ToyPlant(a_s=0.5), num_steps=10)
    assert caps == [None] * 10
    assert controller.state.cap_tokens is None
    assert controller.state.num_updates == 0


def test_apply_config_at_runtime() -> None:
    config = DLFPConfig(
        controller=ControllerMode.DLFP_CT, target_ms=TARGET_MS, gain=0.5, initial_cap_tokens=128
    )
    clock = FakeClock(1000.0)
    controller = PrefillCapController.from_config(config, clock=clock, wall_clock=clock)
    plant = ToyPlant()
    run_sync_steps(controller, clock, plant, num_steps=60)

    # New target: the current cap is kept and re-converges to the new target.
    updated = DLFPConfig.model_validate(config.model_dump() | {"target_ms": 120.0})
    controller.apply_config(updated)
    assert controller.state.target_ms == 120.0
    run_sync_steps(controller, clock, plant, num_steps=60)
    cap = controller.state.cap_tokens
    assert cap is not None and abs(cap - plant.tokens_at(120.0)) <= config.step_tokens

    # Narrower bounds (same initial cap): the cap is clamped into them at once.
    assert cap > 160
    controller.apply_config(
        DLFPConfig.model_validate(updated.model_dump() | {"max_cap_tokens": 160})
    )
    assert controller.state.cap_tokens == 160

    # Mode switch: reset to the new mode's starting cap.
    controller.apply_config(DLFPConfig(controller=ControllerMode.FIXED, fixed_cap_tokens=256))
    assert controller.state.mode == "fixed" and controller.state.cap_tokens == 256
    controller.apply_config(DLFPConfig(controller=ControllerMode.OFF))
    assert controller.state.cap_tokens is None
    controller.apply_config(DLFPConfig(controller=ControllerMode.DLFP, initial_cap_tokens=512))
    assert controller.state.cap_tokens == 512


def test_new_initial_cap_resets() -> None:
    controller, clock = make_controller()
    run_sync_steps(controller, clock, ToyPlant(), num_steps=60)
    controller.apply_params(replace(PARAMS, initial_cap_tokens=256))
    assert controller.state.cap_tokens == 256


def test_state_is_a_read_only_snapshot_with_telemetry_keys() -> None:
    controller, clock = make_controller()
    run_sync_steps(controller, clock, ToyPlant(), num_steps=3)
    state = controller.state
    assert isinstance(state, ControllerState)
    with pytest.raises(AttributeError):
        state.cap_tokens = 1  # type: ignore[misc]
    assert {
        "mode",
        "target_ms",
        "cap_tokens",
        "last_observation_ms",
        "num_updates",
        "last_update_unix_s",
        "num_mixed_steps",
        "num_decode_free_steps",
    } <= state.to_dict().keys()
    assert state.num_updates == 3 and state.last_update_unix_s == clock.now


@pytest.mark.parametrize(
    "changes",
    [
        {"mode": "sometimes"},
        {"gain": 0.0},
        {"min_cap_tokens": 256},  # above the initial cap
        {"step_tokens": 48},  # 16 is not a multiple of 48
    ],
)
def test_invalid_settings_are_refused_before_the_controller(changes: dict[str, object]) -> None:
    """``DLFPConfig`` checks the settings once; ``CapParams`` copies them unchecked."""
    settings = {"controller" if name == "mode" else name: value for name, value in changes.items()}
    with pytest.raises(ValueError):
        DLFPConfig.model_validate({"step_tokens": 16, "min_cap_tokens": 16} | settings)


def test_quantise_rounds_then_clamps() -> None:
    assert PARAMS.clamp(100.0) == 96
    assert PARAMS.clamp(104.0) == 112
    assert PARAMS.clamp(-50.0) == PARAMS.min_cap_tokens
    assert PARAMS.clamp(10**6) == PARAMS.max_cap_tokens


def test_cap_leaves_the_lower_bound_when_one_update_is_under_half_a_step() -> None:
    """Regression: with min == step and gain 0.5, a quantised state never grew."""
    from engine_worker.controller.cap_controller import PrefillCapController

    params = cap_params(
        target_ms=60_000.0,
        initial_cap_tokens=16,
        min_cap_tokens=16,
        step_tokens=16,
        fixed_cap_tokens=16,
        feedforward=False,
        observation="busy",
    )
    controller = PrefillCapController(params, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    now = 0.0
    for _ in range(40):
        cap = controller.on_schedule(num_decoding=1, now_s=now)
        assert cap is not None
        controller.on_scheduled(num_prefill_tokens=cap, num_decode_tokens=1, now_s=now)
        now += 0.002  # 2 ms: far under the 60 s target
        controller.on_step_done(now_s=now)
    assert controller.state.cap_tokens == 1024


def test_dlfp_ct_with_its_cost_model_starts_from_the_floor() -> None:
    """Until the model fits, a planning dlfp-ct starts each start and reset at the floor;
    the paper's dlfp, and dlfp-ct without feed-forward, at initial_cap_tokens."""
    planning = PrefillCapController(replace(PARAMS, feedforward=True))
    assert planning.on_schedule(num_decoding=1) == PARAMS.min_cap_tokens
    planning.reset()
    assert planning.state.cap_tokens == PARAMS.min_cap_tokens
    for params in (replace(PARAMS, controller="dlfp", feedforward=True), PARAMS):
        controller = PrefillCapController(params)
        assert controller.on_schedule(num_decoding=1) == PARAMS.initial_cap_tokens
