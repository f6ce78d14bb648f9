"""FastAPI dependencies: the shared state, the engine, a request's lifecycle, access checks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from engine_worker.contract.api import Engine
from gateway.auth import bearer_token, check_api_key, is_local_client, key_matches
from gateway.errors import APIError
from gateway.lifecycle import Lifecycle
from gateway.response_store import ResponseStore
from gateway.state import GatewayState
from gateway.stored_responses import owner_of


def get_gateway(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state


def get_engine(request: Request) -> Engine:
    return get_gateway(request).engine


def get_lifecycle(request: Request) -> Lifecycle:
    return Lifecycle(get_gateway(request), request)


def get_store(request: Request) -> ResponseStore:
    return get_gateway(request).response_store


def get_owner(request: Request) -> str:
    """Whose stored responses a request sees: its API key's."""
    return owner_of(request, get_gateway(request).settings)


GatewayDep = Annotated[GatewayState, Depends(get_gateway)]
EngineDep = Annotated[Engine, Depends(get_engine)]
LifecycleDep = Annotated[Lifecycle, Depends(get_lifecycle)]
StoreDep = Annotated[ResponseStore, Depends(get_store)]
OwnerDep = Annotated[str, Depends(get_owner)]


def _is_local(request: Request) -> bool:
    trusted = get_gateway(request).settings.trusted_proxy_networks()
    return is_local_client(request.client.host if request.client else "", trusted)


def require_api_key(request: Request) -> None:
    """``DLFP_API_KEYS`` protects /v1/*; with none configured it is open.

    NOTE: ``AccessMiddleware`` makes the same check before the body is read; this one
    keeps a /v1 route closed in an app assembled without that middleware."""
    check_api_key(request, get_gateway(request).settings.api_key_set())


def require_admin(request: Request) -> str:
    """Returns who is asking (token id or address), for the change log."""
    secret = get_gateway(request).settings.admin_token
    if secret is None:
        if _is_local(request):
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
