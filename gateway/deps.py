"""FastAPI dependencies: the parts of the gateway's state a route uses, a request's
lifecycle, access checks.

Each part resolves from the app's ``GatewayState`` (``app.state.gateway``, built by
``create_app``); a route names the parts it uses, never the whole container.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from engine_worker.contract.api import Engine
from gateway.admission import Admission
from gateway.auth import bearer_token, check_api_key, is_local_client, key_matches
from gateway.controller_calls import ControllerCalls
from gateway.errors import APIError
from gateway.lifecycle import Lifecycle
from gateway.metrics import GatewayMetrics
from gateway.response_store import ResponseStore
from gateway.serving_status import ServingStatus
from gateway.settings import Settings
from gateway.state import DLFPInForce, GatewayState
from gateway.stored_responses import owner_of
from gateway.tenants import Tenants


def _gateway(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state


def get_settings(request: Request) -> Settings:
    return _gateway(request).settings


def get_engine(request: Request) -> Engine:
    return _gateway(request).engine


def get_metrics(request: Request) -> GatewayMetrics:
    return _gateway(request).metrics


def get_admission(request: Request) -> Admission:
    return _gateway(request).admission


def get_serving_status(request: Request) -> ServingStatus:
    return _gateway(request).serving


def get_dlfp(request: Request) -> DLFPInForce:
    return _gateway(request).dlfp


def get_tenants(request: Request) -> Tenants:
    return _gateway(request).tenants


def get_response_store(request: Request) -> ResponseStore:
    return _gateway(request).response_store


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
ServingStatusDep = Annotated[ServingStatus, Depends(get_serving_status)]
DLFPDep = Annotated[DLFPInForce, Depends(get_dlfp)]
"""The controller settings in force, which /admin/dlfp replaces."""
ResponseStoreDep = Annotated[ResponseStore, Depends(get_response_store)]
TenantsDep = Annotated[Tenants, Depends(get_tenants)]


def get_controller_calls(
    engine: EngineDep, serving: ServingStatusDep, settings: SettingsDep
) -> ControllerCalls:
    return ControllerCalls(engine, serving, settings.admin_call_timeout_s)


def get_lifecycle(request: Request) -> Lifecycle:
    """A completion request's lifecycle uses nearly every part, so it takes the container."""
    return Lifecycle(_gateway(request), request)


def get_owner(request: Request, settings: SettingsDep) -> str:
    """Whose stored responses a request sees: its API key's."""
    return owner_of(request, settings)


ControllerCallsDep = Annotated[ControllerCalls, Depends(get_controller_calls)]
LifecycleDep = Annotated[Lifecycle, Depends(get_lifecycle)]
OwnerDep = Annotated[str, Depends(get_owner)]


def _is_local(request: Request, settings: Settings) -> bool:
    trusted = settings.trusted_proxy_networks()
    return is_local_client(request.client.host if request.client else "", trusted)


def require_api_key(request: Request, settings: SettingsDep) -> None:
    """``DLFP_API_KEYS`` protects /v1/*; with none configured it is open.

    NOTE: ``AccessMiddleware`` makes the same check before the body is read; this one
    keeps a /v1 route closed in an app assembled without that middleware."""
    check_api_key(request, settings.api_key_set())


def require_admin(request: Request, settings: SettingsDep) -> str:
    """Returns who is asking (token id or address), for the change log."""
    secret = settings.admin_token
    if secret is None:
        if _is_local(request, settings):
            return f"loopback:{request.client.host if request.client else '?'}"
        raise APIError(
            403, "admin is open to loopback only: set DLFP_ADMIN_TOKEN", code="forbidden"
        )
    token = bearer_token(request)
    if token is None:
        raise APIError(
            401,
            "admin requires Authorization: Bearer <DLFP_ADMIN_TOKEN>",
            code="unauthorized",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not key_matches(token, [secret.get_secret_value()]):
        raise APIError(403, "wrong admin token", code="forbidden")
    return "admin-token"


AuthorizedV1 = Depends(require_api_key)
AdminDep = Annotated[str, Depends(require_admin)]
