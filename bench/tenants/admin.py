"""The tenants' limits as the gateway holds them: ``GET /admin/tenants``, a partial
``PATCH /admin/tenants/{name}``, and ``patched``, which sets some limits for the body of
an ``async with`` and puts the earlier values back however it is left (an error, Ctrl-C).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from bench.lib.endpoint import bearer
from bench.tenants.base import Run


class AdminError(RuntimeError):
    """The gateway did not answer an admin call as expected (no token, no such tenant)."""


def _admin_headers(run: Run) -> dict[str, str]:
    if not run.options.admin_token:
        raise AdminError("this scenario needs --admin-token (GET and PATCH /admin/tenants)")
    return bearer(run.options.admin_token)


async def get_tenants(run: Run) -> dict[str, dict[str, Any]]:
    """Each tenant's entry of ``GET /admin/tenants`` (``limits``, ``use``), by name."""
    response = await run.client.get("/admin/tenants", headers=_admin_headers(run))
    if response.status_code != 200:
        raise AdminError(f"GET /admin/tenants: HTTP {response.status_code}: {response.text[:200]}")
    entries = response.json().get("tenants") or []
    return {str(entry["name"]): entry for entry in entries if isinstance(entry, dict)}


async def tenant_limits(run: Run, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The limits of ``names``; AdminError names a tenant the gateway does not have."""
    tenants = await get_tenants(run)
    missing = [name for name in names if name not in tenants]
    if missing:
        raise AdminError(
            f"the gateway has no tenant {', '.join(missing)} (it has {', '.join(tenants)})"
        )
    return {name: dict(tenants[name].get("limits") or {}) for name in names}


async def gateway_max_concurrent(run: Run) -> int | None:
    """``max_concurrent`` of ``GET /admin/admission``; None without an answer."""
    if not run.options.admin_token:
        return None
    try:
        response = await run.client.get("/admin/admission", headers=_admin_headers(run))
        value = response.json().get("settings", {}).get("max_concurrent")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) else None


async def patch_tenant(run: Run, name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``PATCH /admin/tenants/{name}`` with ``fields``; the tenant as it now stands."""
    response = await run.client.patch(
        f"/admin/tenants/{name}", json=dict(fields), headers=_admin_headers(run)
    )
    if response.status_code != 200:
        raise AdminError(
            f"PATCH /admin/tenants/{name} {json.dumps(dict(fields))}: "
            f"HTTP {response.status_code}: {response.text[:200]}"
        )
    answer = response.json()
    return answer if isinstance(answer, dict) else {}


async def _restore(run: Run, old: Mapping[str, Mapping[str, Any]]) -> None:
    for name, fields in old.items():
        try:
            await patch_tenant(run, name, fields)
        except (AdminError, httpx.HTTPError) as exc:
            print(
                f"tenants: could not restore {name}'s limits ({exc}); by hand: PATCH "
                f"/admin/tenants/{name} {json.dumps(dict(fields))}",
                file=sys.stderr,
                flush=True,
            )


@contextlib.asynccontextmanager
async def patched(
    run: Run, changes: Mapping[str, Mapping[str, Any]]
) -> AsyncIterator[dict[str, dict[str, Any]]]:
    """Each tenant's limits changed by ``changes`` (name to fields) for the body; yields
    the earlier values of the changed fields. They are put back on the way out, whatever
    ends the body; one that cannot be is printed with the PATCH that would."""
    limits = await tenant_limits(run, tuple(changes))
    old = {name: {k: limits[name].get(k) for k in fields} for name, fields in changes.items()}
    done: dict[str, dict[str, Any]] = {}
    try:
        for name, fields in changes.items():
            done[name] = old[name]
            await patch_tenant(run, name, fields)
        yield old
    finally:
        # NOTE: shielded, so that a cancellation (Ctrl-C) during the body still restores.
        await asyncio.shield(_restore(run, done))


async def known_limits(run: Run, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The limits of ``names`` where the gateway tells them; {} without an admin token or
    an answer (the scenarios that only read them run without)."""
    if not run.options.admin_token:
        return {}
    try:
        return await tenant_limits(run, names)
    except (AdminError, httpx.HTTPError, ValueError):
        return {}


def flood_streams(run: Run, slots: int) -> int:
    """Streams enough for a tenant that may hold ``slots`` to keep some queued: half as
    many again (``--streams`` overrides)."""
    return run.options.streams or slots + max(2, slots // 2)
