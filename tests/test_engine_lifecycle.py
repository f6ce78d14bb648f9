"""Process lifecycle on the real engine: drain on SIGTERM, exit on engine death.

Each test starts a gateway of its own (it ends the process), on the tiny model.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import TINY_MODEL_NAME, Server, start_server, stop_server
from tests.engine_helpers import chat_body
from tests.http_helpers import sse_data, sse_json

pytestmark = pytest.mark.engine


def _own_server(name: str, model_dir: Path, **env: str) -> Server:
    return start_server(
        name,
        {
            "DLFP_MODEL": str(model_dir),
            "DLFP_SERVED_MODEL_NAME": TINY_MODEL_NAME,
            # The lifecycle does not depend on numerics; float32 is the session gateway's.
            "DLFP_DTYPE": "float32",
            "DLFP_DEVICE": "cpu",
            "DLFP_KV_CACHE_GIB": "1",
            "DLFP_DRAIN_S": "60",
        }
        | env,
    )


def _engine_cores(server: Server) -> list[psutil.Process]:
    children = psutil.Process(server.process.pid).children(recursive=True)
    return [p for p in children if "EngineCore" in " ".join([p.name(), *p.cmdline()])]


def _ends_with_error_then_done(text: str) -> bool:
    data = sse_data(text)
    return len(data) >= 2 and data[-1] == "[DONE]" and '"error"' in data[-2]


def _stream_in_thread(
    server: Server, max_tokens: int, out: dict[str, Any], started: threading.Event
) -> None:
    body = chat_body(
        "Tell me a long story about the station.",
        max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    lines = []
    try:
        with (
            httpx.Client(base_url=server.base_url, timeout=300) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as r,
        ):
            out["status"] = r.status_code
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("data: ") and len(lines) > 4:
                    started.set()
    except httpx.HTTPError as exc:
        out["error"] = repr(exc)
    finally:
        started.set()
        out["text"] = "\n".join(lines)


def test_sigterm_drains_streams_and_exits_zero(tiny_model_dir: Path) -> None:
    server = _own_server("drain-gateway", tiny_model_dir)
    try:
        out: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=_stream_in_thread, args=(server, 1500, out, started))
        worker.start()
        assert started.wait(120)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            refused = client.post("/v1/chat/completions", json=chat_body("hello", 4))
            ready = client.get("/ready")
        assert refused.status_code == 503 and "retry-after" in refused.headers
        assert ready.status_code == 503
        worker.join(300)
        assert out.get("status") == 200, out
        assert sse_data(out["text"])[-1] == "[DONE]"
        usage = [c["usage"] for c in sse_json(out["text"]) if c.get("usage")]
        assert usage and usage[-1]["completion_tokens"] == 1500
        assert server.process.wait(120) == 0
        assert "drain_done" in server.log()
    finally:
        stop_server(server)


def test_engine_death_fails_fast_and_exits_nonzero(tiny_model_dir: Path) -> None:
    """Kill the engine core under a stream: the stream ends with an error at once, and
    serve exits non-zero (the quick tier checks /ready and new requests on a dead engine)."""
    server = _own_server("death-gateway", tiny_model_dir)
    try:
        out: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=_stream_in_thread, args=(server, 3000, out, started))
        worker.start()
        assert started.wait(120)
        children = psutil.Process(server.process.pid).children(recursive=True)
        cores = [p for p in children if "EngineCore" in " ".join([p.name(), *p.cmdline()])]
        assert cores, [p.name() for p in children]
        for proc in cores:
            proc.kill()
        worker.join(120)  # a guard against a hang, not a timing claim
        assert not worker.is_alive()
        assert out.get("status") == 200
        events = sse_json(out["text"])
        assert "error" in events[-1] and sse_data(out["text"])[-1] == "[DONE]"
        # Ended by the engine's death, not by the stream running out or a hung-engine watch.
        assert events[-1]["error"]["code"] == "engine_error", events[-1]
        num_tokens = sum(1 for e in events[:-1] if e.get("choices"))
        assert num_tokens < 3000, num_tokens
        assert server.process.wait(120) != 0
        assert '"event":"engine_dead"' in server.log()
    finally:
        stop_server(server)


def test_two_signals_during_engine_start_leave_no_engine_process(tiny_model_dir: Path) -> None:
    """A second SIGTERM while the engine is still being built stops the gateway without
    orphaning the engine core (uvicorn's re-raise of the signal at exit once did)."""
    env = {
        "DLFP_MODEL": str(tiny_model_dir),
        "DLFP_SERVED_MODEL_NAME": TINY_MODEL_NAME,
        "DLFP_DTYPE": "float32",
        "DLFP_DEVICE": "cpu",
        "DLFP_KV_CACHE_GIB": "1",
    }
    server = start_server("early-stop-gateway", env, wait_for="/health")
    try:
        gateway = psutil.Process(server.process.pid)
        deadline = time.monotonic() + 120
        cores: list[psutil.Process] = []
        while not cores and time.monotonic() < deadline:
            children = gateway.children(recursive=True)
            cores = [p for p in children if "EngineCore" in " ".join([p.name(), *p.cmdline()])]
            time.sleep(0.2)
        assert cores, "no engine core appeared"
        assert httpx.get(server.base_url + "/ready", timeout=10).status_code == 503
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(180)
        _, alive = psutil.wait_procs(cores, timeout=30)
        assert alive == [], [p.pid for p in alive]
    finally:
        stop_server(server)


def test_drain_deadline_cuts_streams_with_an_error_event(tiny_model_dir: Path) -> None:
    server = _own_server("drain-cut-gateway", tiny_model_dir, DLFP_DRAIN_S="2")
    try:
        out: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=_stream_in_thread, args=(server, 3500, out, started))
        worker.start()
        assert started.wait(120)
        server.process.send_signal(signal.SIGTERM)
        worker.join(60)
        assert not worker.is_alive() and out.get("status") == 200, out
        assert _ends_with_error_then_done(out["text"]), out["text"][-400:]
        assert server.process.wait(120) == 0
        assert '"streams_cut":1' in server.log()
    finally:
        stop_server(server)


def test_hung_engine_is_noticed_and_exits_nonzero(tiny_model_dir: Path) -> None:
    """A real hang: the engine-core process is stopped (SIGSTOP) under a running stream."""
    server = _own_server("hung-gateway", tiny_model_dir, DLFP_ENGINE_STALL_S="4", DLFP_DRAIN_S="3")
    cores: list[psutil.Process] = []
    try:
        out: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=_stream_in_thread, args=(server, 3500, out, started))
        worker.start()
        assert started.wait(120)
        cores = _engine_cores(server)
        assert cores
        for proc in cores:
            proc.suspend()
        deadline = time.monotonic() + 30
        while '"event":"engine_hung"' not in server.log() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert '"event":"engine_hung"' in server.log()
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            assert client.get("/ready").status_code == 503
            refused = client.post("/v1/chat/completions", json=chat_body("hello", 4))
            assert refused.status_code == 503
        worker.join(60)
        assert not worker.is_alive() and _ends_with_error_then_done(out["text"])
        for proc in cores:
            proc.resume()  # so that the engine can be shut down cleanly
        assert server.process.wait(120) != 0
    finally:
        for proc in cores:
            with contextlib.suppress(psutil.Error):
                proc.resume()
        stop_server(server)
