"""``/admin/dlfp``: read and tune the DLFP controller and SLO targets at runtime.

Changes reach the scheduler in the engine-core process (through the engine's
DLFP channel) and last until restart. The gateway holds no copy of the
controller's state: every GET reads it from the engine core.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, ValidationError

from engine_worker.contract.api import EngineDeadError, EngineNotReadyError, InvalidRequestError
from engine_worker.contract.dlfp_config import DLFPConfig
from engine_worker.controller.params import STATE_KEYS
from gateway.admission import AdmissionLimits
from gateway.deps import AdminDep, GatewayDep
from gateway.errors import APIError, ErrorResponse, first_error
from gateway.state import GatewayState
from gateway.telemetry import set_controller_target

logger = logging.getLogger("dlfp.admin")

router = APIRouter(prefix="/admin", tags=["admin"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse} for s in (401, 403, 422, 503)
}


_T = TypeVar("_T")


async def _engine_call(gateway: GatewayState, call: Awaitable[_T]) -> _T:
    """An engine-core call with ``admin_call_timeout_s``; any failure of it is a 503.

    NOTE: a call that timed out may still run in the engine core later (it answers
    between steps); GET shows what the scheduler runs with as ``settings_in_engine``."""
    timeout_s = gateway.settings.admin_call_timeout_s
    try:
        return await asyncio.wait_for(call, timeout_s)
    except TimeoutError as exc:
        raise APIError(
            503,
            f"the engine core did not answer within {timeout_s:g} s",
            code="engine_timeout",
            headers={"Retry-After": "5"},
        ) from exc
    except (APIError, InvalidRequestError, EngineDeadError, EngineNotReadyError):
        raise
    except Exception as exc:  # e.g. a failed utility call in the engine core
        raise APIError(503, f"the engine core call failed: {exc}", code="engine_error") from exc


def _invalid(exc: ValidationError) -> APIError:
    first = first_error(exc.errors(), default="invalid settings")
    message = f"{first.param}: {first.message}" if first.param else first.message
    return APIError(422, message, param=first.param, code="invalid_settings")


async def _snapshot(gateway: GatewayState, state: dict[str, Any] | None = None) -> dict[str, Any]:
    gateway.check_engine()
    live = (
        state if state is not None else await _engine_call(gateway, gateway.engine.get_dlfp_state())
    )
    return {
        "settings": gateway.dlfp.model_dump(mode="json"),
        "state": {key: live.get(key) for key in STATE_KEYS}
        | {
            "controller": live.get("mode"),
            # What the scheduler itself runs with: equal to "settings" unless a change failed.
            "settings_in_engine": live.get("config"),
            # Resolved at start from the device and CPU (``auto`` = by capability).
            "dtype": gateway.engine.info.dtype,
            "cpu_features": gateway.engine.info.cpu_features,
        },
    }


async def _apply(
    gateway: GatewayState, new: DLFPConfig, who: str, request: Request
) -> dict[str, Any]:
    old = gateway.dlfp
    state = await _engine_call(gateway, gateway.engine.apply_dlfp_config(new))
    gateway.dlfp = new
    set_controller_target(gateway.metrics, state.get("target_ms"))
    _record_change(gateway, "dlfp", old, new, who, request)
    return await _snapshot(gateway, state)


def _record_change(
    gateway: GatewayState, section: str, old: BaseModel, new: BaseModel, who: str, request: Request
) -> None:
    """Counts an admin change and logs it as ``admin_change``, with each field's old and
    new value."""
    changes = {
        key: {"old": value, "new": getattr(new, key)}
        for key, value in old.model_dump().items()
        if getattr(new, key) != value
    }
    gateway.metrics.admin_changes.inc()
    logger.info(
        f"{section} settings changed",
        extra={
            "event": "admin_change",
            "section": section,
            "who": who,
            "changes": changes,
            "method": request.method,
        },
    )


@router.get("/dlfp", responses=_ERRORS)
async def get_dlfp(gateway: GatewayDep, _: AdminDep) -> dict[str, Any]:
    """The settings in force and the controller's live state, read from the engine core."""
    return await _snapshot(gateway)


@router.put("/dlfp", responses=_ERRORS)
async def put_dlfp(
    gateway: GatewayDep, who: AdminDep, request: Request, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Replace the whole settings object (every field required)."""
    missing = sorted(set(DLFPConfig.model_fields) - set(body))
    if missing:
        raise APIError(
            422,
            f"PUT needs every field; missing: {', '.join(missing)}",
            param=missing[0],
            code="invalid_settings",
        )
    try:
        new = DLFPConfig.model_validate(body)
    except ValidationError as exc:
        raise _invalid(exc) from exc
    async with gateway.dlfp_lock:
        return await _apply(gateway, new, who, request)


@router.patch("/dlfp", responses=_ERRORS)
async def patch_dlfp(
    gateway: GatewayDep, who: AdminDep, request: Request, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Change some fields; the result is validated as a whole before anything applies."""
    # NOTE: merge and apply under one lock, so concurrent PATCHes compose in some
    # order instead of one overwriting the other's fields with stale values.
    async with gateway.dlfp_lock:
        try:
            new = DLFPConfig.model_validate(gateway.dlfp.model_dump() | body)
        except ValidationError as exc:
            raise _invalid(exc) from exc
        return await _apply(gateway, new, who, request)


@router.post("/dlfp/reset", responses=_ERRORS)
async def reset_dlfp(
    gateway: GatewayDep,
    who: AdminDep,
    request: Request,
    model: Annotated[
        bool,
        Query(
            description="Also empty the fitted cost model and the deadline plan's margin window."
        ),
    ] = False,
) -> dict[str, Any]:
    """Reset the controller: cap back to initial_cap_tokens and the guard emptied.

    The fitted cost model and the margin window stay unless ``model=true``. Settings stay as
    they are and counters keep counting.
    """
    gateway.check_engine()
    async with gateway.dlfp_lock:
        state = await _engine_call(gateway, gateway.engine.reset_dlfp(model=model))
    gateway.metrics.admin_changes.inc()
    logger.info(
        "dlfp controller reset",
        extra={
            "event": "admin_reset",
            "section": "dlfp",
            "who": who,
            "method": request.method,
            "model": model,
        },
    )
    return await _snapshot(gateway, state)


def _admission_view(gateway: GatewayState) -> dict[str, Any]:
    a = gateway.admission
    return {
        "settings": a.limits.model_dump(mode="json"),
        "state": {
            "num_active": a.num_active,
            "num_queued": a.num_queued,
            "num_reserved": a.num_reserved,
            "draining": a.draining,
            "prefill_tokens_per_s": a.ttft_estimate.tokens_per_s(),
            "fixed_latency_s": a.ttft_estimate.fixed_s,
            "requests_per_s": a.service_rate.value(a.limits.max_concurrent),
            "retry_after_s": a.retry_after_s(),
            "startup_prior": None if a.prior is None else dataclasses.asdict(a.prior),
        },
    }


@router.get("/admission", responses=_ERRORS)
async def get_admission(gateway: GatewayDep, _: AdminDep) -> dict[str, Any]:
    """Admission limits in force and the live queue."""
    return _admission_view(gateway)


@router.patch("/admission", responses=_ERRORS)
async def patch_admission(
    gateway: GatewayDep, who: AdminDep, request: Request, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Change some admission limits; validated as a whole, applied at once."""
    async with gateway.admission_lock:
        old = gateway.admission.limits
        try:
            new = AdmissionLimits.model_validate(old.model_dump() | body)
        except ValidationError as exc:
            raise _invalid(exc) from exc
        gateway.admission.update_limits(new)
        _record_change(gateway, "admission", old, new, who, request)
        return _admission_view(gateway)


@router.get("/dlfp/steps", responses=_ERRORS)
async def get_dlfp_steps(
    gateway: GatewayDep, _: AdminDep, since: Annotated[int, Query(ge=0)] = 0
) -> dict[str, Any]:
    """Per-step telemetry from the scheduler (a ring buffer of recent steps)."""
    gateway.check_engine()
    steps = await _engine_call(gateway, gateway.engine.get_dlfp_steps(since))
    return {"steps": steps, "next": (steps[-1]["step_index"] + 1) if steps else since}
