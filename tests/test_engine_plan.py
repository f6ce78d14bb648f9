"""``plan`` switches at runtime on the session gateway: the steps after a switch are
planned the new way (the deadline plan's steps carry a margin and a deadline slack)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Server
from tests.engine_helpers import admin, metrics
from tests.test_engine_dlfp import mixed_load

pytestmark = pytest.mark.engine


@pytest.fixture
def restore_dlfp(gateway_server: Server) -> Iterator[dict[str, Any]]:
    before = admin(gateway_server, "GET").json()["settings"]
    yield before
    assert admin(gateway_server, "PUT", json=before).status_code == 200


def planned_steps(server: Server, since_step: int) -> list[dict[str, Any]]:
    response = admin(server, "GET", path="/admin/dlfp/steps", params={"since": since_step})
    assert response.status_code == 200, response.text
    steps: list[dict[str, Any]] = response.json()["steps"]
    return [s for s in steps if s["is_planned"] and s["num_prefill_tokens"] > 0]


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
