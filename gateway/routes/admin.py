"""``/admin/dlfp``: read and tune the DLFP controller and SLO targets at runtime.

Changes reach the scheduler in the engine-core process (through the engine's
DLFP channel) and last until restart. The gateway holds no copy of the
controller's state: every GET reads it from the engine core.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import ValidationError

from engine_worker.dlfp_config import DLFPConfig
from gateway.deps import AdminDep, GatewayDep
from gateway.errors import APIError, ErrorResponse
from gateway.state import GatewayState

logger = logging.getLogger("dlfp.admin")

router = APIRouter(prefix="/admin", tags=["admin"])

STATE_KEYS = (
    "cap_tokens",
    "last_observation_ms",
    "num_updates",
    "last_update_unix_s",
    "num_mixed_steps",
    "num_decode_free_steps",
)
_ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": ErrorResponse} for s in (401, 403, 422, 503)}


def _invalid(exc: ValidationError) -> APIError:
    first = exc.errors()[0] if exc.errors() else {"msg": "invalid settings", "loc": ()}
    param = ".".join(str(p) for p in first.get("loc", ())) or None
    message = str(first.get("msg", "invalid settings")).removeprefix("Value error, ")
    return APIError(422, f"{param}: {message}" if param else message, param=param, code="invalid_settings")


async def _snapshot(gateway: GatewayState, state: dict[str, Any] | None = None) -> dict[str, Any]:
    gateway.check_engine()
    live = state if state is not None else await gateway.engine.get_dlfp_state()
    return {
        "settings": gateway.dlfp.model_dump(mode="json"),
        "state": {key: live.get(key) for key in STATE_KEYS} | {"controller": live.get("controller")},
    }


async def _apply(gateway: GatewayState, new: DLFPConfig, who: str, request: Request) -> dict[str, Any]:
    old = gateway.dlfp
    state = await gateway.engine.apply_dlfp_config(new)
    gateway.dlfp = new
    changed = {
        key: {"old": value, "new": getattr(new, key)}
        for key, value in old.model_dump().items()
        if getattr(new, key) != value
    }
    gateway.metrics.admin_changes.inc()
    gateway.metrics.controller_target.set(new.target_ms / 1000)
    logger.info(
        "dlfp settings changed",
        extra={"event": "admin_change", "section": "dlfp", "who": who, "changes": changed,
               "method": request.method},
    )  # fmt: skip
    return await _snapshot(gateway, state)


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
        raise APIError(422, f"PUT needs every field; missing: {', '.join(missing)}",
                       param=missing[0], code="invalid_settings")  # fmt: skip
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
