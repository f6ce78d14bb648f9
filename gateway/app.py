"""``create_app(settings, engine, dlfp)``: the FastAPI application and its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict

from fastapi import FastAPI

from engine_worker.contract.api import Engine
from engine_worker.contract.dlfp_config import DLFPConfig
from gateway.admission import Admission
from gateway.body_guard import JSONBodyGuardMiddleware
from gateway.client_shares import ClientShares
from gateway.engine_watch import EngineWatch, watch_engine
from gateway.errors import install_error_handlers
from gateway.loop_lag import watch_loop_lag
from gateway.metrics import GatewayMetrics, build_metrics
from gateway.middleware import (
    AccessMiddleware,
    BodySizeLimitMiddleware,
    RequestContextMiddleware,
)
from gateway.routes import admin, dashboard, health, openai
from gateway.serving_status import ServingStatus
from gateway.settings import Settings
from gateway.startup_heap import freeze_startup_heap
from gateway.state import DLFPInForce, GatewayState, serves_shortest_first
from gateway.stored_responses import build_store
from gateway.telemetry import poll_controller, set_controller_target
from gateway.tenant_metrics import build_tenant_metrics
from gateway.tenant_rates import build_rates
from gateway.ttft_estimate import StartupPrior

logger = logging.getLogger("dlfp.gateway")


async def _start_engine(state: GatewayState, freeze_heap: bool) -> None:
    """Starts the engine, reads its start-up fit, then with ``freeze_heap`` freezes the
    start-up heap (``startup_heap``): ``/ready`` turns 200 after all three."""
    serving = state.serving
    serving.engine_starting = True
    try:
        await state.engine.start()
        if state.settings.startup_fit_s > 0:
            await _take_startup_prior(state)
        if freeze_heap:
            freeze_startup_heap()  # before the first stream, which it would stall
    except Exception as exc:  # a failed start must show in /ready, not kill the server
        serving.engine_error = f"{type(exc).__name__}: {exc}"
        logger.exception("engine failed to start", extra={"event": "engine_start_failed"})
    finally:
        serving.engine_starting = False


async def _take_startup_prior(state: GatewayState) -> None:
    """Admission's prior from the cost model the engine fitted at start."""
    try:
        dlfp_state = await state.engine.get_dlfp_state()
    except Exception as exc:  # no DLFP scheduler: admission measures from scratch
        logger.warning(
            "no start-up fit to read; admission starts unmeasured",
            extra={"event": "startup_prior_missing", "reason": f"{type(exc).__name__}: {exc}"},
        )
        return
    coefficients = dlfp_state.get("cost_coefficients")
    prior = StartupPrior.from_coefficients(coefficients) if coefficients else None
    state.admission.prior = prior
    logger.info(
        "admission prior from the start-up fit",
        extra={"event": "startup_prior", "prior": None if prior is None else asdict(prior)},
    )


def create_app(
    settings: Settings,
    engine: Engine,
    dlfp: DLFPConfig,
    metrics: GatewayMetrics | None = None,
    freeze_heap: bool = True,
) -> FastAPI:
    """The gateway: starts ``engine`` in the background and stops it with the app.
    ``dlfp`` is the controller's settings at start, for the engine's device
    (``Settings.dlfp_config``). ``freeze_heap`` freezes the process's start-up heap once
    the engine has started (``startup_heap``): off only where one process starts many
    apps (the HTTP tests), whose later garbage it would keep."""
    tenants = settings.tenants()
    dlfp_in_force = DLFPInForce(dlfp)
    admission = Admission(
        settings.admission_limits(),
        tenant_limits=tenants.limits_of,
        shortest_first=lambda: serves_shortest_first(dlfp_in_force.config),
    )
    metrics = metrics or build_metrics()
    tenant_metrics = build_tenant_metrics(metrics.registry)
    tenant_metrics.register(tenants.names)
    state = GatewayState(
        settings=settings,
        engine=engine,
        metrics=metrics,
        dlfp=dlfp_in_force,
        admission=admission,
        serving=ServingStatus(engine, admission),
        watch=EngineWatch(settings.engine_stall_s),
        response_store=build_store(settings),
        client_shares=ClientShares(lambda: admission.limits),
        tenants=tenants,
        tenant_metrics=tenant_metrics,
        rates=build_rates(settings),
    )
    store, metrics = state.response_store, state.metrics
    metrics.response_store_entries.labels(store.backend).set_function(lambda: store.size()[0])
    metrics.response_store_bytes.labels(store.backend).set_function(lambda: store.size()[1])

    # Read at scrape time: the engine's own count, not the gateway's bookkeeping.
    state.metrics.engine_unfinished.set_function(lambda: engine.num_unfinished_requests)

    def on_hung(message: str) -> None:
        state.serving.engine_error = message

    def admission_share(share: float) -> None:
        state.admission.zero_prefill_share = share

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        starter = asyncio.create_task(_start_engine(state, freeze_heap))
        poller = asyncio.create_task(
            poll_controller(engine, state.metrics, on_zero_prefill_share=admission_share)
        )
        lag = asyncio.create_task(watch_loop_lag(state.metrics.loop_lag))
        watcher = asyncio.create_task(watch_engine(state.watch, on_hung))
        app.state.engine_starter = starter
        target_ms = state.dlfp.config.target_ms
        if target_ms != "auto":  # else the poller reads the target in force
            set_controller_target(state.metrics, target_ms)
        try:
            yield
        finally:
            for task in (lag, watcher, poller, starter):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await engine.shutdown()
            await state.response_store.close()
            await state.rates.close()

    app = FastAPI(
        title="DLFP Gateway",
        summary="OpenAI-compatible gateway with admission control and DLFP prefill capping",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.gateway = state
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(openai.router)
    app.include_router(admin.router)
    app.include_router(dashboard.router)
    # NOTE: the last added runs first: ids and the access log, then the keys, then the
    # body limit, so a request without a key gets 401 before its body is read or sized,
    # then the raw-body checks on what the limit let through.
    app.add_middleware(JSONBodyGuardMiddleware, max_values=settings.max_body_values)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        AccessMiddleware,
        api_keys=settings.api_key_set(),
        metrics_token=settings.metrics_token,
        protected=_docs_paths(app) if settings.protect_docs else (),
    )
    app.add_middleware(RequestContextMiddleware)
    return app


def _docs_paths(app: FastAPI) -> list[str]:
    """The pages about the API rather than of it: the docs, the schema, the dashboard."""
    paths = (app.docs_url, app.swagger_ui_oauth2_redirect_url, app.redoc_url, app.openapi_url)
    return [path for path in paths if path] + ["/dashboard"]
