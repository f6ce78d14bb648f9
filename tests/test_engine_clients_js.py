"""The Vercel AI SDK against the real engine: the embedded SmolLM2's session gateway.

Only plain ``generateText`` and the tool loop forced by name run here, each through the
Responses API and Chat Completions, with 32 output tokens at most: the rest of the SDK's
checks exercise the HTTP layer, which the FAKE engine covers in tests/test_clients_js.py.
What the model says is numerics, so only its shape is asserted.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Server
from tests.test_clients_js import APIS, run_checks

pytestmark = pytest.mark.engine

MODEL = "smollm2-135m-instruct"
KINDS = ("generateText", "toolLoop")


@pytest.fixture(scope="module")
def checks(smollm_server: Server) -> dict[str, dict[str, Any]]:
    return run_checks(smollm_server.base_url, MODEL, KINDS, timeout_s=600)


@pytest.mark.parametrize("check", [f"{api}.{kind}" for api in APIS for kind in KINDS])
def test_the_ai_sdk_on_the_real_engine(checks: dict[str, dict[str, Any]], check: str) -> None:
    assert check in checks, f"{check} did not report: {sorted(checks)}"
    assert checks[check]["ok"], checks[check]["detail"]


@pytest.mark.parametrize("api", APIS)
def test_the_forced_call_is_added_by_the_tool(checks: dict[str, dict[str, Any]], api: str) -> None:
    line = checks[f"{api}.toolLoop"]
    assert line["ok"], line["detail"]
    detail = line["detail"]
    call = detail["calls"][0]
    # The schema constrains the arguments, so they are numbers whatever the model picks.
    assert isinstance(call["a"], int | float) and isinstance(call["b"], int | float)
    assert detail["results"][0] == call["a"] + call["b"]
