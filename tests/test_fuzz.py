"""schemathesis against the app on the FAKE engine, under a real uvicorn socket: a 500
here is the gateway's own, whatever the engine does (quick tier; the real engine's
smoke run is in test_engine_robustness.py)."""

from __future__ import annotations

from gateway.settings import Settings
from tests.fakes import FakeEngine
from tests.fuzz import fuzz_for_500
from tests.http_helpers import fake_app, served_in_thread


def test_schemathesis_finds_no_500_on_the_fake_engine() -> None:
    engine = FakeEngine()
    app = fake_app(Settings(_env_file=None), engine)  # type: ignore[call-arg]
    with served_in_thread(app) as where:
        failures = fuzz_for_500(f"http://{where}", [engine.info.model_name], max_examples=100)
    assert failures == []
