"""Shared fixtures. The real-engine tier shares its gateways across tests.

The session gateway is the real ``dlfp-gateway serve`` in a subprocess, on the
tiny random model the tests make themselves, in float32 (so greedy outputs are
exactly reproducible across chunk sizes). Beside it: the embedded SmolLM2 in the
configured dtype and in float32.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.debian_tools import DebianPrograms, provision
from tests.tiny_model import make_tiny_model

pytest_plugins = ["tests.fake_openai_server"]
"""The FAKE OpenAI streaming server's ``fake_server`` fixture, for the harness tests."""

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
TINY_MODEL_NAME = "tiny-qwen3"
ADMIN_TOKEN = "test-admin-token"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Quick tier first, then the real-engine tier (so a quick failure shows fast)."""
    items.sort(key=lambda item: item.get_closest_marker("engine") is not None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    model_name: str

    def client(self, timeout: float = 120.0, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout, **kwargs)  # type: ignore[arg-type]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """The gateway's structured log lines (one JSON object per event), in order."""
        events = []
        for line in self.log().splitlines():
            if line[:1] == "{":
                with contextlib.suppress(json.JSONDecodeError):
                    events.append(json.loads(line))
        return events


def start_server(
    name: str,
    env_overrides: dict[str, str],
    ready_timeout_s: float = 600.0,
    wait_for: str = "/ready",
) -> Server:
    """``python -m gateway serve`` on a free port; waits for ``wait_for`` to answer 200.

    NOTE: not in a process session of its own (no ``setsid``). With the kernel's
    autogroup scheduling a new session gets its own CPU share, and on two cores the
    engine's busy worker then starves the gateway's event loop: requests were admitted
    one at a time.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "DLFP_HOST": "127.0.0.1",
        "DLFP_PORT": str(port),
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        # No cost-model fit at start unless a test asks for one: it would add its budget
        # to every start.
        "DLFP_STARTUP_FIT_S": "0",
        **env_overrides,
    }
    log_path = ARTIFACTS / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Server(
        f"http://127.0.0.1:{port}", process, log_path, env.get("DLFP_SERVED_MODEL_NAME", "")
    )
    deadline = time.monotonic() + ready_timeout_s
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"gateway exited with {process.returncode}:\n{server.log()[-4000:]}"
                )
            try:
                if client.get(server.base_url + wait_for).status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            time.sleep(1.0)
    stop_server(server)
    raise RuntimeError(f"gateway not ready after {ready_timeout_s} s:\n{server.log()[-4000:]}")


def start_servers(specs: dict[str, dict[str, str]]) -> dict[str, Server]:
    """``start_server`` for each name and environment, all at once; if one fails, the
    others are stopped and its error is raised."""
    with concurrent.futures.ThreadPoolExecutor(len(specs)) as pool:
        futures = {name: pool.submit(start_server, name, env) for name, env in specs.items()}
        concurrent.futures.wait(futures.values())
    failed = [error for f in futures.values() if (error := f.exception()) is not None]
    if failed:
        for future in futures.values():
            if future.exception() is None:
                stop_server(future.result())
        raise failed[0]
    return {name: future.result() for name, future in futures.items()}


def end_server(server: Server) -> None:
    """SIGTERM, once: a second signal would cut the gateway's drain short."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)


def wait_server(server: Server, timeout_s: float = 120.0) -> int:
    """Its exit code; killed, with its children, if it has not exited within the time."""
    try:
        server.process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(server.process.pid).children(recursive=True):
            child.kill()
        server.process.kill()
        server.process.wait()
    return server.process.returncode


def stop_server(server: Server, timeout_s: float = 120.0) -> int:
    end_server(server)
    return wait_server(server, timeout_s)


UNCLEAN_STOP = ("Traceback", "TypeError", "leaked shared_memory")
"""What a stop must not print: a traceback (``AsyncLLM.__del__`` at interpreter exit once
raised TypeError) or the resource tracker's warning about shared memory left behind."""


def assert_stopped_cleanly(
    server: Server, processes: list[psutil.Process], log_start: int = 0
) -> None:
    """Every process of the gateway is gone (the resource tracker, which writes the
    shared-memory warning, last of all), and its log from ``log_start`` (the signal)
    shows no unclean stop."""
    _, alive = psutil.wait_procs(processes, timeout=60)
    assert alive == [], [p.pid for p in alive]
    log = server.log()[log_start:]
    found = [text for text in UNCLEAN_STOP if text in log]
    assert not found, (found, log[-3000:])


def interrupt_server(server: Server, timeout_s: float = 120.0) -> int:
    """A terminal's Ctrl-C: SIGINT to the gateway and, at the same moment, to its engine
    core and workers (``start_server`` puts the gateway in pytest's own process group, so
    the group is signalled process by process). Asserts the stop is clean; its exit code."""
    log_start = len(server.log())
    processes = psutil.Process(server.process.pid).children(recursive=True)
    for process in [psutil.Process(server.process.pid), *processes]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGINT)
    code = wait_server(server, timeout_s)
    assert_stopped_cleanly(server, processes, log_start)
    return code


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / TINY_MODEL_NAME, dtype="float32")


def tiny_gateway_env(model_dir: Path, **env: str) -> dict[str, str]:
    """A gateway on the tiny model, float32: outputs are compared across chunk sizes and
    controllers, and are identical only in float32 (in bf16, as ``auto`` gives on CPUs with
    native bf16, vLLM's CPU kernels round differently per chunk size)."""
    return {
        "DLFP_MODEL": str(model_dir),
        "DLFP_SERVED_MODEL_NAME": TINY_MODEL_NAME,
        "DLFP_DTYPE": "float32",
        "DLFP_DEVICE": "cpu",
        "DLFP_KV_CACHE_GIB": "1",
    } | env


def tiny_served_env(
    model_dir: Path, engine_args: dict[str, str] | None = None, **env: str
) -> dict[str, str]:
    """A tiny-model gateway that tests drive through admin: its token, info logs, and no
    prefix cache (repeated prompts must be prefilled again, or agreement tests compare no
    capping), with ``engine_args`` added to vLLM's."""
    args = {"enable_prefix_caching": "false"} | (engine_args or {})
    return tiny_gateway_env(
        model_dir,
        DLFP_MAX_MODEL_LEN="4096",
        DLFP_ADMIN_TOKEN=ADMIN_TOKEN,
        DLFP_LOG_LEVEL="info",
        DLFP_ENGINE_ARGS=json.dumps(args),
        **env,
    )


SMOLLM_ENV = {
    "DLFP_DEVICE": "cpu",
    "DLFP_KV_CACHE_GIB": "1",
    "DLFP_ADMIN_TOKEN": ADMIN_TOKEN,
    # Repeated prompts must be prefilled again, or agreement tests compare no capping.
    "DLFP_ENGINE_ARGS": '{"enable_prefix_caching": "false"}',
}
"""The embedded SmolLM2's gateways: the model is the default, so no ``DLFP_MODEL``."""


@pytest.fixture(scope="session")
def gateway_server(tiny_model_dir: Path) -> Iterator[Server]:
    """The one real gateway + vLLM engine on the tiny model, shared by the test session."""
    # A short fit: the tiny model's steps take milliseconds.
    server = start_server(
        "session-gateway", tiny_served_env(tiny_model_dir, DLFP_STARTUP_FIT_S="3")
    )
    yield server
    # Stopped as a terminal's Ctrl-C stops `make serve`; SIGTERM's stop is checked on a
    # gateway of its own (tests/test_engine_lifecycle.py).
    code = interrupt_server(server)
    assert code == 0, f"gateway exited {code} on SIGINT:\n{server.log()[-3000:]}"


@pytest.fixture(scope="session")
def smollm_servers() -> Iterator[dict[str, Server]]:
    """The embedded SmolLM2's gateways by dtype, ``configured`` (``DLFP_DTYPE``, else
    ``auto``) and ``float32``, started when a test first needs one: started with the
    tiny-model gateway, they idled beside the Chromium dashboard test in runs where it
    timed out. Where the configured dtype resolves to float32 (an AVX2-only CPU, by
    default) one gateway is both; elsewhere the two start and stop together."""
    from engine_worker.client.cpu_features import read_cpu_flags, resolve_dtype

    configured = resolve_dtype(os.environ.get("DLFP_DTYPE", "auto"), "cpu", read_cpu_flags())
    specs = {"smollm2-gateway": SMOLLM_ENV}
    if configured != "float32":
        specs["smollm2-float32-gateway"] = SMOLLM_ENV | {"DLFP_DTYPE": "float32"}
    servers = start_servers(specs)
    yield {
        "configured": servers["smollm2-gateway"],
        "float32": servers.get("smollm2-float32-gateway", servers["smollm2-gateway"]),
    }
    for server in servers.values():
        end_server(server)
    codes = {name: wait_server(server) for name, server in servers.items()}
    failed = {name: code for name, code in codes.items() if code != 0}
    assert not failed, (failed, [servers[name].log()[-3000:] for name in failed])


@pytest.fixture(scope="session")
def smollm_server(smollm_servers: dict[str, Server]) -> Server:
    """The embedded SmolLM2 in the configured dtype (``DLFP_DTYPE``, else ``auto``)."""
    return smollm_servers["configured"]


@pytest.fixture(scope="session")
def smollm_f32_server(smollm_servers: dict[str, Server]) -> Server:
    """The embedded SmolLM2 in float32: ``smollm_server`` itself where the configured dtype
    resolves to float32, else a gateway of its own."""
    return smollm_servers["float32"]


@pytest.fixture(scope="session")
def debian_programs() -> DebianPrograms:
    """Chromium (the dashboard test), promtool (the Prometheus config and exposition
    tests) and redis-server (the shared response store), installed from Debian together
    where missing."""
    return DebianPrograms(provision())


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 ``config.json`` (no weights) for vLLM's in-process ``Scheduler``."""
    from tests.scheduler_helpers import write_tiny_model  # imports vLLM: only when asked

    return write_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture
def build(model_dir: Path) -> Callable[..., Any]:
    """``build(cls, dlfp=None, ...)``: vLLM's real ``Scheduler`` (or a DLFP one), in-process."""
    from tests.scheduler_helpers import build_scheduler

    return functools.partial(build_scheduler, model_dir)
