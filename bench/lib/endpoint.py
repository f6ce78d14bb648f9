"""Talking to the server outside the measured streams: readiness, model name, admin switch,
and waiting for the server to drain."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from bench.lib.client import server_root
from bench.lib.scrape import parse_exposition

DRAIN_GAUGES = (
    "dlfp_active_requests",
    "dlfp_queued_requests",
    "dlfp_engine_unfinished_requests",
)
"""The gateway's gauges that are all 0 once it holds no request, queued or in the engine."""


class EndpointError(RuntimeError):
    """The endpoint is not usable for a trial (not ready, or it refused the admin switch)."""


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def wait_ready(
    client: httpx.AsyncClient, base_url: str, api_key: str | None, timeout_s: float
) -> list[str]:
    """Poll ``GET /v1/models`` until it answers 200; return the served model ids."""
    url = server_root(base_url) + "/v1/models"
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            response = await client.get(url, headers=bearer(api_key), timeout=10.0)
            if response.status_code == 200:
                return [str(m.get("id")) for m in response.json().get("data", [])]
            last = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code in (401, 403, 404):
                raise EndpointError(f"{url}: {last}")
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise EndpointError(f"{url} not ready after {timeout_s:.0f} s ({last})")
        await asyncio.sleep(1.0)


async def wait_drained(
    client: httpx.AsyncClient, base_url: str, timeout_s: float = 300.0, interval_s: float = 0.5
) -> float:
    """Poll ``GET /metrics`` until every one of ``DRAIN_GAUGES`` is 0; the seconds waited.

    An endpoint without ``/metrics``, or without these gauges, counts as drained: it is not
    this gateway, and there is nothing to wait for.
    """
    url = server_root(base_url) + "/metrics"
    start = time.monotonic()
    while True:
        try:
            response = await client.get(url, timeout=10.0)
            if response.status_code != 200:
                return time.monotonic() - start
            values = parse_exposition(response.text, DRAIN_GAUGES)
            busy = {name: value for name, value in values.items() if value != 0}
            if not busy:
                return time.monotonic() - start
            last = ", ".join(f"{name} {value:g}" for name, value in busy.items())
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() - start >= timeout_s:
            raise EndpointError(f"{url}: not drained after {timeout_s:g} s ({last})")
        await asyncio.sleep(interval_s)


def parse_patch(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        patch = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"admin patch is not JSON: {text!r} ({exc})") from exc
    if not isinstance(patch, dict):
        raise ValueError(f"admin patch must be a JSON object, got {text!r}")
    return patch


async def apply_admin_patch(
    client: httpx.AsyncClient, base_url: str, patch: dict[str, Any], admin_token: str | None
) -> dict[str, Any]:
    """``PATCH /admin/dlfp`` on our gateway; returns the settings now in force."""
    url = server_root(base_url) + "/admin/dlfp"
    try:
        response = await client.patch(url, json=patch, headers=bearer(admin_token), timeout=60.0)
    except httpx.HTTPError as exc:
        raise EndpointError(f"PATCH {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise EndpointError(
            f"PATCH {url} {json.dumps(patch)}: HTTP {response.status_code}: {response.text[:300]}"
        )
    body = response.json()
    return body if isinstance(body, dict) else {"response": body}


async def set_admission(
    client: httpx.AsyncClient, base_url: str, patch: dict[str, Any], admin_token: str | None
) -> dict[str, Any]:
    """``PATCH /admin/admission`` with ``patch`` on our gateway; returns the values the
    patched limits had before (the patch that restores them)."""
    url = server_root(base_url) + "/admin/admission"
    try:
        before = await client.get(url, headers=bearer(admin_token), timeout=60.0)
        response = await client.patch(url, json=patch, headers=bearer(admin_token), timeout=60.0)
    except httpx.HTTPError as exc:
        raise EndpointError(f"PATCH {url}: {type(exc).__name__}: {exc}") from exc
    if before.status_code != 200 or response.status_code != 200:
        failed = before if before.status_code != 200 else response
        raise EndpointError(
            f"{url} {json.dumps(patch)}: HTTP {failed.status_code}: {failed.text[:300]}"
        )
    old = before.json().get("settings", {})
    return {key: old.get(key) for key in patch}


async def get_settings(
    client: httpx.AsyncClient, base_url: str, admin_token: str | None
) -> dict[str, Any] | None:
    """The DLFP settings in force (``GET /admin/dlfp``), or None where there are none."""
    url = server_root(base_url) + "/admin/dlfp"
    try:
        response = await client.get(url, headers=bearer(admin_token), timeout=60.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    settings = response.json().get("settings")
    return settings if isinstance(settings, dict) else None


async def reset_controller(
    client: httpx.AsyncClient, base_url: str, admin_token: str | None
) -> dict[str, Any]:
    """``POST /admin/dlfp/reset``: every arm's trial starts from the initial cap, with the
    cost model and the deadline plan's margin window kept as fitted so far (``model=true``
    would empty them): each arm starts as a freshly started gateway does, after its
    start-up fit (``startup_fit_s``)."""
    url = server_root(base_url) + "/admin/dlfp/reset"
    try:
        response = await client.post(url, headers=bearer(admin_token), timeout=60.0)
    except httpx.HTTPError as exc:
        raise EndpointError(f"POST {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise EndpointError(f"POST {url}: HTTP {response.status_code}: {response.text[:300]}")
    body = response.json()
    return body if isinstance(body, dict) else {"response": body}
