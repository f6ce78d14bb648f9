"""Run the gateway under uvicorn until a signal stops it."""

from __future__ import annotations

import logging

import uvicorn

from gateway.app import create_app
from gateway.engine import build_engine, resolve_device
from gateway.logs import configure_logging
from gateway.settings import Settings

logger = logging.getLogger("dlfp.gateway")


def serve(settings: Settings) -> int:
    """Blocks until SIGINT/SIGTERM; 0 after a clean stop, 1 if the engine failed."""
    configure_logging(settings.log_level)
    device = resolve_device(settings)
    dlfp = settings.dlfp_config(device)
    engine = build_engine(settings, device, dlfp)
    app = create_app(settings, engine, dlfp)
    logger.info(
        "gateway starting",
        extra={"event": "gateway_start", "host": settings.host, "port": settings.port,
               "device": device, "controller": dlfp.controller.value},
    )  # fmt: skip
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_config=None, access_log=False
    )
    uvicorn.Server(config).run()
    failed = app.state.gateway.engine_error is not None
    logger.info("gateway stopped", extra={"event": "gateway_stop", "failed": failed})
    return 1 if failed else 0
