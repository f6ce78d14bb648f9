"""``/admin/dlfp``: read and tune the DLFP controller and SLO targets at runtime.

Changes reach the scheduler in the engine-core process (through the engine's
DLFP channel) and last until restart. The gateway holds no copy of the
controller's state: every GET reads it from the engine core.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, ValidationError

from engine_worker.contract.dlfp_config import DLFPConfig
from engine_worker.controller.params import STATE_KEYS
from gateway.admission import Admission, AdmissionLimits
from gateway.controller_calls import ControllerCalls
from gateway.deps import (
    AdminDep,
    AdmissionDep,
    ControllerCallsDep,
    DLFPDep,
    MetricsDep,
    TenantsDep,
)
from gateway.errors import APIError, ErrorResponse, first_error
from gateway.metrics import GatewayMetrics
from gateway.state import DLFPInForce
from gateway.telemetry import set_controller_target
from gateway.tenant_limits import TenantLimits
from gateway.tenants import Tenant

logger = logging.getLogger("dlfp.admin")

router = APIRouter(prefix="/admin", tags=["admin"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse} for s in (401, 403, 422, 503)
}


def _invalid(exc: ValidationError) -> APIError:
    first = first_error(exc.errors(), default="invalid settings")
    message = f"{first.param}: {first.message}" if first.param else first.message
    return APIError(422, message, param=first.param, code="invalid_settings")


async def _snapshot(
    controller: ControllerCalls, dlfp: DLFPInForce, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    controller.check()
    engine = controller.engine
    live = state if state is not None else await controller.run(engine.get_dlfp_state())
    return {
        "settings": dlfp.config.model_dump(mode="json"),
        "state": {key: live.get(key) for key in STATE_KEYS}
        | {
            "controller": live.get("mode"),
            # What the scheduler itself runs with: equal to "settings" unless a change failed.
            "settings_in_engine": live.get("config"),
            # Resolved at start from the device and CPU (``auto`` = by capability).
            "dtype": engine.info.dtype,
            "cpu_features": engine.info.cpu_features,
        },
    }


async def _apply(
    controller: ControllerCalls,
    dlfp: DLFPInForce,
    metrics: GatewayMetrics,
    new: DLFPConfig,
    who: str,
    request: Request,
) -> dict[str, Any]:
    old = dlfp.config
    state = await controller.run(controller.engine.apply_dlfp_config(new))
    dlfp.config = new
    set_controller_target(metrics, state.get("target_ms"))
    _record_change(metrics, "dlfp", old, new, who, request)
    return await _snapshot(controller, dlfp, state)


def _record_change(
    metrics: GatewayMetrics,
    section: str,
    old: BaseModel,
    new: BaseModel,
    who: str,
    request: Request,
) -> None:
    """Counts an admin change and logs it as ``admin_change``, with each field's old and
    new value."""
    changes = {
        key: {"old": value, "new": getattr(new, key)}
        for key, value in old.model_dump().items()
        if getattr(new, key) != value
    }
    metrics.admin_changes.inc()
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
async def get_dlfp(controller: ControllerCallsDep, dlfp: DLFPDep, _: AdminDep) -> dict[str, Any]:
    """The settings in force and the controller's live state, read from the engine core."""
    return await _snapshot(controller, dlfp)


@router.put("/dlfp", responses=_ERRORS)
async def put_dlfp(
    controller: ControllerCallsDep,
    dlfp: DLFPDep,
    metrics: MetricsDep,
    who: AdminDep,
    request: Request,
    body: Annotated[dict[str, Any], Body()],
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
    async with dlfp.lock:
        return await _apply(controller, dlfp, metrics, new, who, request)


@router.patch("/dlfp", responses=_ERRORS)
async def patch_dlfp(
    controller: ControllerCallsDep,
    dlfp: DLFPDep,
    metrics: MetricsDep,
    who: AdminDep,
    request: Request,
    body: Annotated[dict[str, Any], Body()],
) -> dict[str, Any]:
    """Change some fields; the result is validated as a whole before anything applies."""
    # NOTE: merge and apply under one lock, so concurrent PATCHes compose in some
    # order instead of one overwriting the other's fields with stale values.
    async with dlfp.lock:
        try:
            new = DLFPConfig.model_validate(dlfp.config.model_dump() | body)
        except ValidationError as exc:
            raise _invalid(exc) from exc
        return await _apply(controller, dlfp, metrics, new, who, request)


@router.post("/dlfp/reset", responses=_ERRORS)
async def reset_dlfp(
    controller: ControllerCallsDep,
    dlfp: DLFPDep,
    metrics: MetricsDep,
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
    controller.check()
    async with dlfp.lock:
        state = await controller.run(controller.engine.reset_dlfp(model=model))
    metrics.admin_changes.inc()
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
    return await _snapshot(controller, dlfp, state)


def _admission_view(a: Admission) -> dict[str, Any]:
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
async def get_admission(admission: AdmissionDep, _: AdminDep) -> dict[str, Any]:
    """Admission limits in force and the live queue."""
    return _admission_view(admission)


@router.patch("/admission", responses=_ERRORS)
async def patch_admission(
    admission: AdmissionDep,
    metrics: MetricsDep,
    who: AdminDep,
    request: Request,
    body: Annotated[dict[str, Any], Body()],
) -> dict[str, Any]:
    """Change some admission limits; validated as a whole, applied at once."""
    # NOTE: nothing from reading the limits to applying them awaits, so concurrent
    # PATCHes cannot interleave; an await added here would need a lock, as /dlfp has.
    old = admission.limits
    try:
        new = AdmissionLimits.model_validate(old.model_dump() | body)
    except ValidationError as exc:
        raise _invalid(exc) from exc
    admission.update_limits(new)
    _record_change(metrics, "admission", old, new, who, request)
    return _admission_view(admission)


def _tenant_view(tenant: Tenant, admission: Admission) -> dict[str, Any]:
    slots, queued = admission.tenant_use(tenant.name)
    return {
        "name": tenant.name,
        "limits": tenant.limits.model_dump(mode="json"),
        "num_keys": len(tenant.key_digests),
        "may_raise_priority": tenant.may_raise_priority,
        "use": {"slots": slots, "queued": queued},
    }


@router.get("/tenants", responses=_ERRORS)
async def get_tenants(tenants: TenantsDep, admission: AdmissionDep, _: AdminDep) -> dict[str, Any]:
    """Each tenant's limits and live use (its keys are never shown)."""
    return {"tenants": [_tenant_view(t, admission) for t in tenants]}


@router.patch("/tenants/{name}", responses={**_ERRORS, 404: {"model": ErrorResponse}})
async def patch_tenant(
    name: str,
    tenants: TenantsDep,
    admission: AdmissionDep,
    metrics: MetricsDep,
    who: AdminDep,
    request: Request,
    body: Annotated[dict[str, Any], Body()],
) -> dict[str, Any]:
    """Change some of a tenant's limits until restart; validated as a whole."""
    tenant = tenants.get(name)
    if tenant is None:
        raise APIError(404, f"no tenant named {name!r}", param="name", code="not_found")
    try:
        new = TenantLimits.model_validate(tenant.limits.model_dump() | body)
    except ValidationError as exc:
        raise _invalid(exc) from exc
    changed = tenants.with_limits(name, new)
    admission.tenant_limits_changed()
    _record_change(metrics, f"tenant {name}", tenant.limits, new, who, request)
    return _tenant_view(changed, admission)


@router.get("/dlfp/steps", responses=_ERRORS)
async def get_dlfp_steps(
    controller: ControllerCallsDep, _: AdminDep, since: Annotated[int, Query(ge=0)] = 0
) -> dict[str, Any]:
    """Per-step telemetry from the scheduler (a ring buffer of recent steps)."""
    controller.check()
    steps = await controller.run(controller.engine.get_dlfp_steps(since))
    return {"steps": steps, "next": (steps[-1]["step_index"] + 1) if steps else since}
