"""Liveness, readiness and the Prometheus exposition."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.deps import MetricsDep, ServingStatusDep

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers. Says nothing about the engine."""
    return {"status": "ok"}


@router.get("/ready", responses={503: {"description": "not serving"}})
async def ready(serving: ServingStatusDep) -> JSONResponse:
    """200 only while the engine serves and the gateway admits requests."""
    status, body = serving.readiness()
    return JSONResponse(body, status_code=status)


@router.get("/metrics", response_class=Response)
async def metrics(metrics: MetricsDep) -> Response:
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
