"""DLFP on the real engine (CPU, tiny float32 model): runtime tuning through
/admin/dlfp, the plan switched at runtime, and token-for-token agreement between
controller modes."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server
from tests.engine_helpers import admin, long_prompt, metrics, steps_since, stream_chat

pytestmark = pytest.mark.engine

SHORT = [
    f"Question {i}: what did the passengers see from the window of the train?" for i in range(8)
]


@pytest.fixture
def restore_dlfp(gateway_server: Server) -> Iterator[dict[str, Any]]:
    before = admin(gateway_server, "GET").json()["settings"]
    yield before
    assert admin(gateway_server, "PUT", json=before).status_code == 200


def mixed_load(
    server: Server, tag: int, max_tokens: int = 400, num_long: int = 3
) -> dict[str, str]:
    """Short greedy streams, then long prompts sent once every short one is decoding."""
    prompts = [f"{p} (run {tag})" for p in SHORT]
    longs = [long_prompt(1000 * tag + i, 5000) for i in range(num_long)]
    decoding = threading.Semaphore(0)
    with concurrent.futures.ThreadPoolExecutor(len(prompts) + len(longs)) as pool:
        futures = {
            p: pool.submit(stream_chat, server, p, max_tokens, decoding.release) for p in prompts
        }
        for _ in prompts:
            assert decoding.acquire(timeout=120)
        futures |= {p: pool.submit(stream_chat, server, p, 16) for p in longs}
        results = {p: f.result() for p, f in futures.items()}
    for p, r in results.items():
        assert r["status"] == 200, r
        assert r["completion_tokens"] == (16 if p in longs else max_tokens), r
    return {p: r["text"] for p, r in results.items()}


def state(server: Server) -> dict[str, Any]:
    body: dict[str, Any] = admin(server, "GET").json()
    return body["state"]


def test_admin_auth_on_real_server(gateway_server: Server) -> None:
    with httpx.Client(base_url=gateway_server.base_url) as client:
        assert client.get("/admin/dlfp").status_code == 401
        assert (
            client.get("/admin/dlfp", headers={"Authorization": "Bearer wrong"}).status_code == 403
        )
        assert client.patch("/admin/dlfp", json={"gain": 0.2}).status_code == 401


def test_get_reads_engine_core_state(gateway_server: Server) -> None:
    before = state(gateway_server)
    stream_chat(gateway_server, "Say something about the fields.", 8)
    after = state(gateway_server)
    # Only the scheduler in the engine-core process counts steps.
    assert after["num_steps"] > before["num_steps"]
    assert after["settings_in_engine"] == admin(gateway_server, "GET").json()["settings"]


def test_patch_target_moves_the_cap(gateway_server: Server, restore_dlfp: dict[str, Any]) -> None:
    r = admin(
        gateway_server,
        "PATCH",
        json={"controller": "dlfp-ct", "plan": "target", "target_ms": 1, "initial_cap_tokens": 256},
    )
    assert r.status_code == 200 and r.json()["state"]["controller"] == "dlfp-ct"
    updates = state(gateway_server)["num_updates"]
    mixed_load(gateway_server, tag=1)
    tight = state(gateway_server)
    assert tight["num_updates"] > updates
    assert admin(gateway_server, "PATCH", json={"target_ms": 60_000}).status_code == 200
    mixed_load(gateway_server, tag=2)
    loose = state(gateway_server)
    assert tight["cap_tokens"] < loose["cap_tokens"], (tight, loose)
    assert tight["cap_tokens"] == restore_dlfp["min_cap_tokens"]


def test_concurrent_patches_leave_consistent_state(
    gateway_server: Server, restore_dlfp: dict[str, Any]
) -> None:
    patches = [{"target_ms": 100 + i} for i in range(6)] + [
        {"gain": round(0.1 * (i + 1), 1)} for i in range(6)
    ]
    with concurrent.futures.ThreadPoolExecutor(len(patches)) as pool:
        codes = list(
            pool.map(lambda p: admin(gateway_server, "PATCH", json=p).status_code, patches)
        )
    assert codes == [200] * len(patches)
    final = admin(gateway_server, "GET").json()
    assert final["settings"] == final["state"]["settings_in_engine"]
    assert final["settings"]["target_ms"] in {100 + i for i in range(6)}
    assert final["settings"]["gain"] in {round(0.1 * (i + 1), 1) for i in range(6)}


def test_reset_keeps_the_fitted_model_unless_asked(
    gateway_server: Server, restore_dlfp: dict[str, Any]
) -> None:
    patch = {
        "controller": "dlfp-ct",
        "plan": "target",
        "target_ms": 60_000,
        "initial_cap_tokens": 256,
    }
    assert admin(gateway_server, "PATCH", json=patch).status_code == 200
    mixed_load(gateway_server, tag=3)
    learned = state(gateway_server)
    assert learned["cap_tokens"] > restore_dlfp["min_cap_tokens"]  # planned up, loose target
    assert learned["cost_model_ready"] is True
    reset = admin(gateway_server, "POST", path="/admin/dlfp/reset")
    assert reset.status_code == 200, reset.text
    after = reset.json()["state"]
    # Back to the starting cap; the fit describes the machine and stays.
    assert after["cap_tokens"] == restore_dlfp["min_cap_tokens"]
    assert after["cost_model_ready"] is True
    assert after["cost_coefficients"] == learned["cost_coefficients"]
    # Counters keep counting; settings are untouched.
    assert after["num_steps"] >= learned["num_steps"]
    assert reset.json()["settings"]["target_ms"] == 60_000
    emptied = admin(gateway_server, "POST", path="/admin/dlfp/reset", params={"model": "true"})
    assert emptied.status_code == 200, emptied.text
    assert emptied.json()["state"]["cost_model_ready"] is False
    assert emptied.json()["state"]["margin_samples"] == 0
    # The next mixed steps fit it again.
    mixed_load(gateway_server, tag=4)
    assert state(gateway_server)["cost_model_ready"] is True


def test_startup_fit_ran_before_ready(gateway_server: Server) -> None:
    """The session gateway fits its cost model at start (DLFP_STARTUP_FIT_S=3)."""
    events = gateway_server.events()
    names = [e.get("event") for e in events]
    assert "cost_model_fit" in names and "engine_ready" in names
    assert names.index("cost_model_fit") < names.index("engine_ready")
    fit = events[names.index("cost_model_fit")]
    assert fit["ready"] is True, fit
    assert fit["mixed_steps"] > 0 and fit["prompts"] > 0, fit
    assert len(fit["coefficients"]) == 6, fit
    # How long it took is a timing, not asserted: the time-out that ends it is asyncio's.
    assert fit["seconds"] > 0, fit


def test_invalid_put_changes_nothing(gateway_server: Server, restore_dlfp: dict[str, Any]) -> None:
    before = admin(gateway_server, "GET").json()
    r = admin(gateway_server, "PUT", json=before["settings"] | {"min_cap_tokens": 2048})
    assert r.status_code == 422 and "error" in r.json()
    after = admin(gateway_server, "GET").json()
    assert after["settings"] == before["settings"]
    assert after["state"]["settings_in_engine"] == before["state"]["settings_in_engine"]


def test_outputs_identical_with_controller_off_and_on(
    gateway_server: Server, restore_dlfp: dict[str, Any]
) -> None:
    """The controller changes when tokens are computed, never which (greedy, float32)."""
    outputs = {}
    modes = {
        "off": {"controller": "off"},
        "fixed": {"controller": "fixed", "fixed_cap_tokens": 32},
        "dlfp-ct": {"controller": "dlfp-ct", "plan": "target", "target_ms": 1},
        # SRPF order and the feed-forward cap, at a target it can plan for.
        "dlfp-ct-ff": {
            "controller": "dlfp-ct",
            "plan": "target",
            "target_ms": 20,
            "feedforward": True,
        },
        "dlfp-ct-fcfs": {
            "controller": "dlfp-ct",
            "plan": "target",
            "target_ms": 20,
            "prefill_order": "fcfs",
        },
        # The default: the deadline plan, to the streams' ITL deadlines.
        "dlfp-ct-deadline": {"controller": "dlfp-ct", "plan": "deadline", "feedforward": True},
        "dlfp": {"controller": "dlfp", "target_ms": 1},
        # Device time fed back: the timer wraps the worker's calls, never their results.
        "dlfp-ct-device": {"controller": "dlfp-ct", "plan": "deadline", "observation": "device"},
    }
    for name, patch in modes.items():
        assert admin(gateway_server, "PATCH", json=patch).status_code == 200
        mixed_before = state(gateway_server)["num_mixed_steps"]
        outputs[name] = mixed_load(gateway_server, tag=7)
        # NOTE: the guard only keeps the comparison from passing on no capping. A small
        # cap by construction (fixed 32, a 1 ms target at the floor) chunks every long
        # prompt many times; a 20 ms plan may take a prompt in a few steps on a fast CPU
        # (6 on an AMX Xeon in float32), so there at least one mixed step is asked for.
        planned = (
            patch.get("target_ms") == 20
            or patch.get("plan") == "deadline"
            or "observation" in patch
        )
        if name != "off":
            num_mixed = state(gateway_server)["num_mixed_steps"] - mixed_before
            assert num_mixed > (0 if planned else 10), (name, num_mixed)
    for name in outputs:
        differing = [p[:40] for p in outputs["off"] if outputs["off"][p] != outputs[name][p]]
        assert differing == [], (name, differing)


def planned_steps(server: Server, since_step: int) -> list[dict[str, Any]]:
    return [
        s for s in steps_since(server, since_step) if s["is_planned"] and s["num_prefill_tokens"]
    ]


def test_plan_switches_at_runtime(gateway_server: Server, restore_dlfp: dict[str, Any]) -> None:
    patch = {"controller": "dlfp-ct", "feedforward": True, "plan": "target"}
    response = admin(gateway_server, "PATCH", json=patch)
    assert response.status_code == 200, response.text
    assert response.json()["state"]["plan"] == "target"
    assert response.json()["state"]["margin"] is None
    start = response.json()["state"]["num_steps"]
    mixed_load(gateway_server, tag=41)
    target_steps = planned_steps(gateway_server, start)
    assert target_steps and all(s["margin"] is None for s in target_steps)

    response = admin(gateway_server, "PATCH", json={"plan": "deadline"})
    assert response.status_code == 200, response.text
    state = response.json()["state"]
    assert state["plan"] == "deadline" and state["margin"] >= 1.0
    start = state["num_steps"]
    mixed_load(gateway_server, tag=42)
    deadline_steps = planned_steps(gateway_server, start)
    assert deadline_steps and all(s["margin"] is not None for s in deadline_steps)
    assert all(s["deadline_slack_ms"] is not None for s in deadline_steps)
    after = admin(gateway_server, "GET").json()["state"]
    assert after["num_deadline_steps"] > state["num_deadline_steps"]
    # The gateway copies the engine's counts into its counters (twice a second).
    exported = 0.0
    for _ in range(20):
        exported = metrics(gateway_server).get("dlfp_controller_deadline_steps_total", 0.0)
        if exported >= after["num_deadline_steps"]:
            break
        time.sleep(0.5)
    assert exported >= after["num_deadline_steps"]
    assert metrics(gateway_server)['dlfp_controller_plan{plan="deadline"}'] == 1.0


def test_device_observation_times_every_step_where_it_executes(
    gateway_server: Server, restore_dlfp: dict[str, Any]
) -> None:
    """``observation: device`` switched on at runtime: every completed step carries the
    worker's own time and dlfp-ct feeds it back. How closely it agrees with the host's
    busy time is printed, not asserted: a timing, which a shared machine can skew."""
    # A 20 ms target chunks each long prompt over many mixed steps.
    patch = {"controller": "dlfp-ct", "plan": "target", "target_ms": 20, "observation": "device"}
    response = admin(gateway_server, "PATCH", json=patch)
    assert response.status_code == 200, response.text
    start = response.json()["state"]["num_steps"]
    mixed_load(gateway_server, tag=51, max_tokens=200)
    steps = steps_since(gateway_server, start)
    assert steps
    assert all(s["device_ms"] is not None for s in steps), [
        s["step_index"] for s in steps if s["device_ms"] is None
    ]
    ct_steps = [s for s in steps if s["mode"] == "dlfp-ct"]
    assert ct_steps and all(s["observation_ms"] == s["device_ms"] for s in ct_steps)
    mixed = [s for s in steps if s["is_mixed"] and s["busy_ms"] is not None]
    assert mixed
    gaps = [abs(s["device_ms"] - s["busy_ms"]) for s in mixed]
    agreeing = [
        s for s, gap in zip(mixed, gaps, strict=True) if gap <= max(0.05 * s["busy_ms"], 5.0)
    ]
    ratios = sorted(s["device_ms"] / s["busy_ms"] for s in mixed)
    print(
        f"\ndevice vs busy on {len(mixed)} mixed steps: {len(agreeing)} within 5% or 5 ms; "
        f"median busy {sorted(s['busy_ms'] for s in mixed)[len(mixed) // 2]:.1f} ms, "
        f"median gap {sorted(gaps)[len(gaps) // 2]:.2f} ms, max gap {max(gaps):.2f} ms, "
        f"device/busy from {ratios[0]:.3f} to {ratios[-1]:.3f}"
    )
    assert all(s["device_ms"] > 0 for s in mixed)
    after = admin(gateway_server, "GET").json()["state"]
    assert after["observation_in_force"] == "device"
    assert after["host_share_ms"] is not None and after["host_share_ms"] >= 0
    assert admin(gateway_server, "PATCH", json={"observation": "busy"}).status_code == 200
    assert admin(gateway_server, "GET").json()["state"]["host_share_ms"] is None
