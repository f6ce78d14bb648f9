"""Run the gateway under uvicorn, with a drain on SIGTERM and an exit on engine death.

On the first SIGTERM or SIGINT the gateway stops admitting (``/ready`` and new
requests answer 503 while the socket stays open), lets streams in flight finish
for up to ``drain_s``, ends those still running with an error event, then stops
uvicorn and the engine and exits 0. A second signal stops serving at once (an
engine still starting is stopped first). If the engine fails to start, its core
dies or it hangs (``engine_watch``), the same drain runs and the process exits 1,
so that its supervisor restarts it. An engine core that dies during a SIGTERM drain
makes the exit 1 too; during a SIGINT drain it does not, since a terminal's Ctrl-C
reaches the engine core as well and stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Iterable
from types import FrameType

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.auto import AutoHTTPProtocol as HttpProtocol

from gateway.app import create_app
from gateway.auth import is_loopback_host
from gateway.connections import start_probe_listener, with_header_timeout
from gateway.engine import build_engine, resolve_device
from gateway.logs import configure_logging
from gateway.settings import Settings, drop_secret_variables
from gateway.state import GatewayState

logger = logging.getLogger("dlfp.gateway")

CUT_GRACE_S = 5.0
"""After the drain deadline: how long the cut streams get to send their last events."""


UNSENT_LIMIT_BYTES = 128 * 1024
"""Most bytes a connection's kernel buffer holds that are not yet sent
(``TCP_NOTSENT_LOWAT``)."""


def limit_unsent(servers: Iterable[asyncio.AbstractServer]) -> None:
    """Cap the unsent bytes of every connection the listening sockets accept.

    NOTE: ``stream_write_timeout_s`` starts when a write blocks. Without the cap Linux
    grows a connection's send buffer up to ``tcp_wmem``'s 4 MB, and a client that
    stopped reading 8 streams of 20 logprobs took 30 s to fill it before any write
    blocked, so its slots were held for a minute. The sockets accepted inherit the
    option; bytes in flight to a reading client are not limited by it.
    """
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if option is None:  # not Linux or macOS: the kernel's buffers decide
        return
    for server in servers:
        for sock in getattr(server, "sockets", ()):
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, option, UNSENT_LIMIT_BYTES)


class GatewayServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        state: GatewayState,
        drain_s: float,
        probe_port: int | None = None,
    ) -> None:
        super().__init__(config)
        self.state = state
        self.drain_s = drain_s
        self.probe_port = probe_port
        self._probe_listener: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._drain_signal: int | None = None
        self._watcher: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)  # type: ignore[arg-type]
        limit_unsent(self.servers)
        if self.probe_port is not None:
            self._probe_listener = await start_probe_listener(
                self.state.serving,
                self.config.host,
                self.probe_port,
                self.state.settings.header_timeout_s,
            )
        self._watcher = self._loop.create_task(self._watch_engine())

    async def shutdown(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        if self._probe_listener is not None:
            self._probe_listener.close()
        # NOTE: the engine's is_dead also holds once the app's lifespan has stopped it, so
        # the watch ends, with a last look, just before that stop (after uvicorn's wait
        # for open connections): a death up to then makes the exit 1, the stop does not.
        stop_app = self.lifespan.shutdown

        async def stop_app_after_last_look() -> None:
            self._stop_watching()
            await stop_app()

        self.lifespan.shutdown = stop_app_after_last_look
        try:
            await super().shutdown(sockets)  # type: ignore[arg-type]
        finally:
            self._stop_watching()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_task is not None or self._loop is None:
            super().handle_exit(sig, frame)  # a second signal: stop now
            return
        logger.info(
            "signal received, draining",
            extra={"event": "drain_start", "signal": sig, "drain_s": self.drain_s},
        )
        self._drain_signal = sig
        self._loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        if self._drain_task is None and self._loop is not None:
            self._drain_task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        self.state.serving.start_draining()
        await self._wait_idle(self.drain_s)
        left = self.state.admission.num_active
        if left:
            # The streams still running end with an error event and [DONE].
            self.state.serving.cut_streams()
            await self._wait_idle(CUT_GRACE_S)
        logger.info("drain finished", extra={"event": "drain_done", "streams_cut": left})
        self.should_exit = True

    async def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.state.admission.num_active > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    async def _watch_engine(self) -> None:
        """Until the engine is stopped: a failed engine (it never started, it hung or its
        core died) starts the drain, or, already draining, makes the exit 1."""
        while True:
            await asyncio.sleep(0.5)
            if self._has_engine_failed() and self._drain_task is None:
                self._begin_drain()

    def _has_engine_failed(self) -> bool:
        """Records a dead engine core in ``engine_error``, which ``serve`` exits 1 on.

        NOTE: a terminal's Ctrl-C sends SIGINT to the engine core too, which then stops
        by itself during the drain: a stop, not a failure. SIGTERM (a supervisor's stop)
        reaches the gateway alone, so an engine core gone during its drain has died.
        """
        serving = self.state.serving
        if self._drain_signal == signal.SIGINT:
            return serving.engine_error is not None
        if serving.engine_error is None and serving.engine.is_dead:
            serving.engine_error = "the engine core died"
            logger.error(
                "engine died",
                extra={"event": "engine_dead", "draining": self._drain_task is not None},
            )
        return serving.engine_error is not None

    def _stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
            self._has_engine_failed()


def warn_if_admin_open(settings: Settings) -> bool:
    """Logs ``admin_open`` (and returns True) when /admin has no token and may answer
    clients beyond this host: it listens beyond loopback, or trusts proxies.

    /admin then answers loopback clients and ``DLFP_TRUSTED_PROXIES`` only, but a proxy on
    the same host (or a port published by a container runtime) connects from loopback,
    and a trusted proxy relays whoever reaches it.
    """
    trusted = [str(network) for network in settings.trusted_proxy_networks()]
    if settings.admin_token is not None or (not trusted and is_loopback_host(settings.host)):
        return False
    if trusted:
        reach = "loopback clients and DLFP_TRUSTED_PROXIES, so whoever those proxies relay"
    else:
        reach = "loopback clients, a proxy on this host included, while listening beyond it"
    logger.warning(
        f"admin open: no admin token; /admin answers {reach}. Set DLFP_ADMIN_TOKEN",
        extra={"event": "admin_open", "host": settings.host, "trusted_proxies": trusted},
    )
    return True


def warn_if_api_open(settings: Settings) -> bool:
    """Logs ``api_open`` (and returns True) when /v1 has no API key off loopback: then
    anyone who reaches the port runs completions on this engine."""
    if settings.api_key_set() or is_loopback_host(settings.host):
        return False
    logger.warning(
        "api open: listening beyond loopback with no API keys; /v1 answers anyone who "
        "reaches the port. Set DLFP_API_KEYS (or DLFP_API_KEYS_FILE)",
        extra={"event": "api_open", "host": settings.host},
    )
    return True


def note_if_metrics_open(settings: Settings) -> bool:
    """Logs ``metrics_open`` (and returns True) when /metrics has no token off loopback:
    on purpose where a scraper sends none (the inference pool's endpoint picker)."""
    if settings.metrics_token is not None or is_loopback_host(settings.host):
        return False
    logger.info(
        "metrics open: listening beyond loopback with no metrics token; /metrics answers "
        "anyone who reaches the port. Set DLFP_METRICS_TOKEN (or DLFP_METRICS_TOKEN_FILE)",
        extra={"event": "metrics_open", "host": settings.host},
    )
    return True


UVICORN_SHUTDOWN_S = 5
"""After the drain: how long uvicorn waits for open connections before it closes them."""


def uvicorn_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=UVICORN_SHUTDOWN_S,
        # NOTE: not the admission limits: uvicorn counts idle connections here too, so a
        # limit near them let idle sockets refuse every probe and request. Admission
        # bounds the work; this bounds the file descriptors.
        limit_concurrency=settings.max_connections,
        http=with_header_timeout(HttpProtocol, settings.header_timeout_s),
    )


def serve(settings: Settings) -> int:
    """Blocks until stopped: 0 after a clean stop, 1 if the engine failed at any point
    before it was stopped."""
    configure_logging(settings.log_level)
    dropped = drop_secret_variables(os.environ)  # before any engine process starts
    device = resolve_device(settings)
    dlfp = settings.dlfp_config(device)  # raises SettingsError: the CLI exits 2
    engine = build_engine(settings, device, dlfp)
    app = create_app(settings, engine, dlfp)
    state: GatewayState = app.state.gateway
    logger.info(
        "gateway starting",
        extra={
            "event": "gateway_start",
            "host": settings.host,
            "port": settings.port,
            "device": device,
            "controller": dlfp.controller.value,
        },
    )
    if dropped:
        logger.info(
            "secret variables removed from the environment the engine processes inherit",
            extra={"event": "secret_variables_dropped", "variables": dropped},
        )
    warn_if_admin_open(settings)
    warn_if_api_open(settings)
    note_if_metrics_open(settings)
    config = uvicorn_config(app, settings)
    GatewayServer(config, state, settings.drain_s, settings.probe_port).run()
    failed = state.serving.engine_error is not None
    logger.info("gateway stopped", extra={"event": "gateway_stop", "failed": failed})
    return 1 if failed else 0
