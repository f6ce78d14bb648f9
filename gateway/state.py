"""The gateway's shared state: the parts one app's requests share, built with the app.

Routes take the parts they use through ``deps``; the lifecycle of a completion request,
which uses nearly all of them, and the server's drain take the whole container.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from engine_worker.contract.api import Engine
from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig, PrefillOrder
from gateway.admission import Admission
from gateway.client_shares import ClientShares
from gateway.engine_watch import EngineWatch
from gateway.metrics import GatewayMetrics
from gateway.response_store import ResponseStore
from gateway.serving_status import ServingStatus
from gateway.settings import Settings
from gateway.tenant_metrics import TenantMetrics
from gateway.tenant_rates import Rates
from gateway.tenants import Tenants


@dataclass
class DLFPInForce:
    """The controller settings in force (the engine core holds the live state);
    ``/admin/dlfp`` replaces them whole, under ``lock``."""

    config: DLFPConfig
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def serves_shortest_first(config: DLFPConfig) -> bool:
    """Whether the engine's capped steps serve the shortest pending prefill first (what
    admission's TTFT prediction assumes of the prompts ahead)."""
    return config.controller != ControllerMode.OFF and config.prefill_order == PrefillOrder.SRPF


@dataclass
class GatewayState:
    settings: Settings
    engine: Engine
    metrics: GatewayMetrics
    dlfp: DLFPInForce
    admission: Admission
    serving: ServingStatus
    """Whether the gateway serves: the engine's health and the drain."""
    watch: EngineWatch
    response_store: ResponseStore
    """What /v1/responses stores and reads back (``stored_responses``)."""
    client_shares: ClientShares
    """What each client holds before its requests stream (``client_shares``)."""
    tenants: Tenants
    """Who shares the gateway (``tenants``)."""
    tenant_metrics: TenantMetrics
    rates: Rates
    """Each tenant's request and token rates (``tenant_rates``)."""
    keepalive_s: float = 10.0
