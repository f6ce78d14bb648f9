"""``serve``'s exit status when the engine dies during a drain (quick tier, FAKE engine).

``serve`` runs for real here, under uvicorn on a free loopback port, with the FAKE
engine: a script started with the server holds a stream slot, signals the drain the way
a SIGTERM does (``handle_exit``), and kills the engine while the drain waits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway import server
from gateway.settings import SECRET_VARIABLES, Settings
from tests.fakes import FakeEngine
from tests.log_records import records_fixture  # noqa: F401 (the records fixture)
from tests.loop_turns import until_polled

Script = Callable[[server.GatewayServer, FakeEngine], Awaitable[None]]


class _StopCountsAsDeath(FakeEngine):
    """As the real engine: once stopped, ``is_dead`` holds."""

    async def shutdown(self) -> None:
        await super().shutdown()
        self.kill()


def _serve(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine, script: Script) -> int:
    """``serve`` on ``engine``; ``script`` runs on the server's loop once it listens."""
    tasks: list[asyncio.Task[None]] = []

    class ScriptedServer(server.GatewayServer):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets)
            tasks.append(asyncio.get_running_loop().create_task(script(self, engine)))

    for name in SECRET_VARIABLES:  # serve() drops them: they come back after the test
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(server, "configure_logging", lambda level: None)
    monkeypatch.setattr(server, "build_engine", lambda *args, **kwargs: engine)
    monkeypatch.setattr(server, "GatewayServer", ScriptedServer)
    settings = Settings(_env_file=None, host="127.0.0.1", port=0, device="cpu", startup_fit_s=0)  # type: ignore[call-arg]
    code = server.serve(settings)
    (task,) = tasks
    assert task.done() and task.exception() is None
    return code


def _drain(sig: int, die: bool) -> Script:
    """Holds a slot, signals the drain, kills the engine while the drain waits (if
    ``die``), then lets the slot go."""

    async def script(gateway: server.GatewayServer, engine: FakeEngine) -> None:
        state = gateway.state
        await until_polled(lambda: engine.is_ready, timeout_s=10.0)
        release = asyncio.Event()
        held = asyncio.Event()

        async def hold() -> None:
            async with state.admission.slot(prefill_tokens=1):
                held.set()
                await release.wait()

        holder = asyncio.create_task(hold())
        await held.wait()
        gateway.handle_exit(sig, None)
        await until_polled(lambda: state.serving.draining, timeout_s=10.0)
        if die:
            engine.kill()
        release.set()
        await holder

    return script


def test_engine_death_during_a_sigterm_drain_exits_1(
    monkeypatch: pytest.MonkeyPatch, records: list[logging.LogRecord]
) -> None:
    assert _serve(monkeypatch, FakeEngine(), _drain(signal.SIGTERM, die=True)) == 1
    by_event = {r.__dict__.get("event"): r for r in records}
    assert by_event["engine_dead"].__dict__["draining"] is True
    assert by_event["gateway_stop"].__dict__["failed"] is True


def test_a_clean_sigterm_drain_exits_0_though_the_stopped_engine_reads_dead(
    monkeypatch: pytest.MonkeyPatch, records: list[logging.LogRecord]
) -> None:
    engine = _StopCountsAsDeath()
    assert _serve(monkeypatch, engine, _drain(signal.SIGTERM, die=False)) == 0
    assert engine.is_dead  # stopped by the app's lifespan, after the last look
    assert "engine_dead" not in {r.__dict__.get("event") for r in records}


def test_an_engine_stopping_during_a_sigint_drain_exits_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A terminal's Ctrl-C reaches the engine core too: it stops by itself, it did not die.
    assert _serve(monkeypatch, FakeEngine(), _drain(signal.SIGINT, die=True)) == 0
