"""SIMULATION: the feedback controllers replayed over vLLM's dispatch loop.

Nothing here runs vLLM or measures real time: ``bench.studies.dispatch_sim`` replays
the order of events in ``EngineCore.step`` (queue depth 1) and
``EngineCore.step_with_batch_queue`` (depth 2) with a fake clock, a simulated
host and a simulated device (see its docstring for what it cannot show). The
claims under test, over host times from 1 ms to 50 ms a step:

- host-bound (the paper's 0.6B case), even with a two-deep queue, the
  scheduler-call interval tracks the step it is attributed to, and ``dlfp``
  holds its target: the paper's positive result;
- device-bound (8B, 32B), with a two-deep queue the interval measures the
  step *before*, ``dlfp`` misjudges and overshoots, while ``dlfp-ct`` holds;
- synchronously, the busy time leaves the host time out and overshoots by it,
  while the completion interval (what a stream waits) holds the target.
"""

from __future__ import annotations

import pytest

from bench.studies.dispatch_sim import LARGE, SMALL, TARGET_MS, Plant, simulate

HOST_MS = (1.0, 10.0, 25.0, 50.0)


def within(value: float, reference: float, fraction: float) -> bool:
    return abs(value - reference) <= fraction * reference


@pytest.mark.parametrize("plant", [SMALL, LARGE], ids=["host-bound", "device-bound"])
@pytest.mark.parametrize("host_ms", HOST_MS[:3])
def test_simulation_sync_loop_completion_interval_holds_target(
    plant: Plant, host_ms: float
) -> None:
    result = simulate("dlfp-ct", 1, plant.with_host(host_ms), "completion")
    assert result.num_updates > 50
    assert within(result.p95_gap_ms, TARGET_MS, 0.10)
    assert result.num_misjudged_updates == 0


@pytest.mark.parametrize("host_ms", HOST_MS[1:])
def test_simulation_sync_loop_busy_time_overshoots_by_the_host_time(host_ms: float) -> None:
    busy = simulate("dlfp-ct", 1, LARGE.with_host(host_ms), "busy")
    completion = simulate("dlfp-ct", 1, LARGE.with_host(host_ms), "completion")
    # Busy time holds the *device* at the target; the streams also wait for the host.
    assert busy.p95_gap_ms > TARGET_MS + 0.5 * host_ms
    assert busy.p95_gap_ms > completion.p95_gap_ms


def test_simulation_sync_loop_controllers_agree() -> None:
    interval = simulate("dlfp", 1, LARGE)
    completion = simulate("dlfp-ct", 1, LARGE, "completion")
    # Synchronously, the scheduler-call interval is the completion interval.
    assert within(interval.final_cap_tokens, completion.final_cap_tokens, 0.10)


@pytest.mark.parametrize("host_ms", HOST_MS)
def test_simulation_two_deep_queue_host_bound_interval_controller_works(host_ms: float) -> None:
    """The paper's positive result: host-bound, the interval measures the step itself."""
    result = simulate("dlfp", 2, SMALL.with_host(host_ms))
    assert result.num_updates > 50
    assert result.p95_gap_ms <= 1.05 * TARGET_MS


@pytest.mark.parametrize("host_ms", HOST_MS)
def test_simulation_two_deep_queue_device_bound_interval_controller_misjudges(
    host_ms: float,
) -> None:
    """The paper's failure: device-bound, the interval measures the step before."""
    result = simulate("dlfp", 2, LARGE.with_host(host_ms))
    # It read decode-only iterations as prefill chunks and raised the cap while
    # the device was still busy with a chunk that was over the target...
    assert result.num_misjudged_updates > 10
    # ...so its mixed iterations settle well above the target.
    assert result.p95_gap_ms > 1.25 * TARGET_MS


@pytest.mark.parametrize("observation", ["busy", "completion"])
@pytest.mark.parametrize("host_ms", HOST_MS)
def test_simulation_two_deep_queue_device_bound_completion_timed_holds_target(
    host_ms: float, observation: str
) -> None:
    result = simulate("dlfp-ct", 2, LARGE.with_host(host_ms), observation)
    assert within(result.p95_gap_ms, TARGET_MS, 0.10)
    assert result.num_misjudged_updates == 0
    # Steps dispatched under an older cap completed after a cap change (while the
    # cap was still moving): each still counted, for the cap it ran under.
    assert result.num_stale_observations == 0


def test_simulation_max_observation_is_the_completion_interval() -> None:
    """busy(k) <= completion(k) always, so "max" adds nothing once completions pair up."""
    for plant in (SMALL, LARGE):
        for depth in (1, 2):
            completion = simulate("dlfp-ct", depth, plant.with_host(25.0), "completion")
            assert simulate("dlfp-ct", depth, plant.with_host(25.0), "max") == completion


def test_simulation_known_limit_host_bound_queue_completion_lags() -> None:
    """What ``dlfp-ct`` cannot do: host-bound with a two-deep queue at 50 ms a step.

    Step k is seen complete only after the host has prepared step k+1, so the
    completion interval of k carries k+1's host time: the observation is
    attributed one step early and the tail overshoots (the interval controller,
    above, does not). Kept as a test so that a fix shows up here.
    """
    result = simulate("dlfp-ct", 2, SMALL.with_host(50.0), "completion")
    assert result.p95_gap_ms > 1.25 * TARGET_MS
    assert result.p50_gap_ms < TARGET_MS
