"""The start-up heap is frozen out of the collector's reach before the gateway is ready
(quick tier, FAKE engine): what start-up made is no longer walked by a collection, what
serving makes later still is."""

from __future__ import annotations

import gc
import logging

import pytest

from tests.fakes import FakeEngine
from tests.http_helpers import running_app


def _tracked_ids() -> set[int]:
    """The objects a collection walks (the permanent generation is not among them)."""
    return {id(o) for o in gc.get_objects()}


async def test_the_start_up_heap_is_frozen_before_the_gateway_is_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gc.unfreeze()  # as a fresh process: nothing frozen by an earlier test
    made_at_start = [object()]
    assert id(made_at_start) in _tracked_ids()
    try:
        with caplog.at_level(logging.INFO, logger="dlfp.gateway"):
            async with running_app(FakeEngine(), freeze_heap=True) as app:
                assert app.state.gateway.serving.is_ready
                assert gc.get_freeze_count() > 0
                made_while_serving = [object()]
                tracked = _tracked_ids()
                assert id(made_at_start) not in tracked  # frozen: no collection walks it
                assert id(made_while_serving) in tracked  # serving's garbage is still collected
        frozen = [r for r in caplog.records if getattr(r, "event", "") == "startup_heap_frozen"]
        assert len(frozen) == 1 and frozen[0].__dict__["objects"] > 0
    finally:
        gc.unfreeze()
