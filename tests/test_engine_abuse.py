"""``bench abuse``'s cheap scenarios against the real engine: a lone surrogate as a stop
string, a non-streamed reply too big to build, a schema too deep and too many tools are
all refused, and the refusals leave no engine request behind. The admission limits of
the shared gateway are left as they are."""

from __future__ import annotations

import time

import pytest

from bench.abuse.base import AbuseOptions
from bench.abuse.command import format_table, run_abuse
from tests.conftest import ADMIN_TOKEN, TINY_MODEL_NAME, Server

pytestmark = pytest.mark.engine

CHEAP = ("surrogate-stop", "reply-too-big", "deep-schema")


async def test_the_cheap_abuse_scenarios_pass_on_the_real_engine(gateway_server: Server) -> None:
    options = AbuseOptions(
        base_url=gateway_server.base_url,
        model=TINY_MODEL_NAME,
        admin_token=ADMIN_TOKEN,
        scenarios=CHEAP,
        num_surrogate=20,
        request_timeout_s=300.0,
    )
    start = time.monotonic()
    outcomes = await run_abuse(options)
    print(f"\nabuse scenarios {', '.join(CHEAP)}: {time.monotonic() - start:.1f} s")
    print(format_table(outcomes))
    assert [o.scenario for o in outcomes] == list(CHEAP)
    for outcome in outcomes:
        assert outcome.passed, (outcome.scenario, outcome.failures, outcome.figures)
    surrogate = outcomes[0]
    assert surrogate.figures["by_status"] == {"400": 20}
    assert surrogate.figures["baseline_by_status"] == {"200": 20}
