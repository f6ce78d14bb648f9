"""Gateways of their own on the real engine: drain on SIGTERM, exit on engine death, and
tenants that share no prefix cache.

Each test takes a gateway of its own, on the tiny model (and most end it).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import (
    Server,
    assert_stopped_cleanly,
    start_server,
    start_servers,
    stop_server,
    tiny_gateway_env,
)
from tests.engine_helpers import chat_body, long_prompt, metric_sum, metrics
from tests.http_helpers import sse_data, sse_json

pytestmark = pytest.mark.engine


def _env(model_dir: Path, **env: str) -> dict[str, str]:
    return tiny_gateway_env(model_dir, **({"DLFP_DRAIN_S": "60"} | env))


@pytest.fixture(scope="module")
def own_servers(tiny_model_dir: Path) -> Iterator[dict[str, Server]]:
    """One gateway for each test that ends its process, started together: a start is
    mostly processes importing vLLM one after another, so two cores start three in about
    the time of two. A test takes its own and ends it; teardown stops what is left."""
    servers = start_servers(
        {
            # 30,000 tokens is far beyond what the tiny model decodes in a 15 s drain.
            "drain-gateway": _env(
                tiny_model_dir,
                DLFP_DRAIN_S="15",
                DLFP_MAX_MODEL_LEN="32768",
                DLFP_MAX_TOKENS_LIMIT="30000",
            ),
            "death-gateway": _env(tiny_model_dir),
            "hung-gateway": _env(tiny_model_dir, DLFP_ENGINE_STALL_S="4", DLFP_DRAIN_S="3"),
            # Two tenants, a key each, and vLLM's prefix cache (on by default).
            "tenants-gateway": _env(tiny_model_dir, DLFP_API_KEYS=",".join(TENANT_KEYS)),
        }
    )
    yield servers
    for server in servers.values():
        stop_server(server)


TENANT_KEYS = ("sk-tenant-one", "sk-tenant-two")


def _prefix_cache_hits(server: Server) -> float:
    return metric_sum(metrics(server), "vllm:prefix_cache_hits_total")


def test_tenants_share_no_prefix_cache_hits(own_servers: dict[str, Server]) -> None:
    """vLLM's own prefix-cache counters, not timings: one tenant's repeat of a prompt hits
    the cache, another tenant's identical prompt does not."""
    server = own_servers["tenants-gateway"]
    prompt = long_prompt(seed=7, num_chars=1200)

    def send(token: str) -> float:
        before = _prefix_cache_hits(server)
        r = httpx.post(
            server.base_url + "/v1/chat/completions",
            json=chat_body(prompt, 1),
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        return _prefix_cache_hits(server) - before

    one, two = TENANT_KEYS
    assert send(one) == 0  # first seen
    assert send(two) == 0  # the same prompt, another tenant: no hit
    assert send(one) > 0  # the first tenant's repeat hits its own cache


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


def test_sigterm_drains_streams_then_cuts_the_rest_and_exits_zero(
    own_servers: dict[str, Server],
) -> None:
    """SIGTERM: new requests get 503 with Retry-After, a stream that ends within the drain
    deadline completes, and one that cannot (30,000 tokens, far beyond what the tiny model
    decodes in 15 s on any CPU) is cut with an error event and [DONE]; then exit 0."""
    server = own_servers["drain-gateway"]
    try:
        short: dict[str, Any] = {}
        long: dict[str, Any] = {}
        events = {"short": threading.Event(), "long": threading.Event()}
        workers = [
            threading.Thread(target=_stream_in_thread, args=(server, 64, short, events["short"])),
            threading.Thread(target=_stream_in_thread, args=(server, 30_000, long, events["long"])),
        ]
        for worker in workers:
            worker.start()
        assert all(event.wait(120) for event in events.values())
        processes = psutil.Process(server.process.pid).children(recursive=True)
        log_start = len(server.log())
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            refused = client.post("/v1/chat/completions", json=chat_body("hello", 4))
            ready = client.get("/ready")
        assert refused.status_code == 503 and "retry-after" in refused.headers
        assert ready.status_code == 503
        for worker in workers:
            worker.join(120)  # a guard against a hang, not a timing claim
            assert not worker.is_alive()
        assert short.get("status") == 200, short
        assert sse_data(short["text"])[-1] == "[DONE]"
        usage = [c["usage"] for c in sse_json(short["text"]) if c.get("usage")]
        assert usage and usage[-1]["completion_tokens"] == 64
        assert long.get("status") == 200, long
        assert _ends_with_error_then_done(long["text"]), long["text"][-400:]
        assert server.process.wait(120) == 0
        drained = [e for e in server.events() if e.get("event") == "drain_done"]
        assert [e["streams_cut"] for e in drained] == [1], drained
        # No traceback (AsyncLLM.__del__ at exit) and no shared memory left behind.
        assert_stopped_cleanly(server, processes, log_start)
    finally:
        stop_server(server)


def test_engine_death_fails_fast_and_exits_nonzero(own_servers: dict[str, Server]) -> None:
    """Kill the engine core under a stream: the stream ends with an error at once, and
    serve exits non-zero (the quick tier checks /ready and new requests on a dead engine)."""
    server = own_servers["death-gateway"]
    try:
        out: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(target=_stream_in_thread, args=(server, 3000, out, started))
        worker.start()
        assert started.wait(120)
        cores = _engine_cores(server)
        assert cores, "no engine core among the gateway's processes"
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
    server = start_server("early-stop-gateway", _env(tiny_model_dir), wait_for="/health")
    try:
        deadline = time.monotonic() + 120
        cores: list[psutil.Process] = []
        while not cores and time.monotonic() < deadline:
            cores = _engine_cores(server)
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


def test_hung_engine_is_noticed_and_exits_nonzero(own_servers: dict[str, Server]) -> None:
    """A real hang: the engine-core process is stopped (SIGSTOP) under a running stream."""
    server = own_servers["hung-gateway"]
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
