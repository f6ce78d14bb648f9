"""/metrics behind its scrape token, the docs and the dashboard behind an API key, and
/admin's loopback rule by address only (quick tier, FAKE engine)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.settings import Settings
from tests.http_helpers import fake_client

DOCS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")
DASHBOARD = ("/dashboard", "/dashboard/dashboard.js")
OPEN = ("/health", "/ready")


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_metrics_token_protects_metrics_only() -> None:
    async with fake_client(metrics_token="scrape-me", api_keys="k1") as (client, _, _):
        for headers in ({}, _bearer("nope"), _bearer("k1")):
            r = await client.get("/metrics", headers=headers)
            assert r.status_code == 401, headers
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "authentication_error"
            assert "DLFP_METRICS_TOKEN" in error["message"]
            assert r.headers["www-authenticate"] == "Bearer"
        r = await client.get("/metrics", headers=_bearer("scrape-me"))
        assert r.status_code == 200 and "dlfp_requests_total" in r.text
        # The scrape token is no API key.
        assert (await client.get("/v1/models", headers=_bearer("scrape-me"))).status_code == 401
        for path in OPEN + DOCS[:1] + DASHBOARD:
            assert (await client.get(path)).status_code == 200, path


@pytest.mark.parametrize("value", [None, ""])
async def test_metrics_stay_open_without_a_token(value: str | None) -> None:
    settings: dict[str, Any] = {} if value is None else {"metrics_token": value}
    assert Settings(_env_file=None, **settings).metrics_token is None  # type: ignore[call-arg]
    async with fake_client(**settings) as (client, _, _):
        assert (await client.get("/metrics")).status_code == 200


async def test_protect_docs_puts_the_docs_and_dashboard_behind_an_api_key() -> None:
    async with fake_client(protect_docs=True, api_keys="k1,k2") as (client, _, _):
        for path in DOCS + DASHBOARD:
            for headers in ({}, _bearer("nope")):
                r = await client.get(path, headers=headers)
                assert r.status_code == 401, (path, headers)
                assert r.json()["error"]["code"] == "invalid_api_key"
            r = await client.get(path, headers=_bearer("k2"))
            assert r.status_code == 200, path
        for path in (*OPEN, "/metrics"):
            assert (await client.get(path)).status_code == 200, path


async def test_docs_and_dashboard_are_open_by_default() -> None:
    async with fake_client(api_keys="k1") as (client, _, _):
        for path in DOCS + DASHBOARD:
            assert (await client.get(path)).status_code == 200, path
        assert (await client.get("/v1/models")).status_code == 401


async def test_admin_loopback_means_a_loopback_address() -> None:
    async with fake_client() as (_, app, _):
        for host, status in (("testclient", 403), ("localhost", 200), ("::1", 200)):
            transport = httpx.ASGITransport(app=app, client=(host, 4000))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert (await client.get("/admin/dlfp")).status_code == status, host


def test_the_dashboard_sends_the_metrics_token_it_was_given() -> None:
    from importlib.resources import files

    static = files("gateway").joinpath("static")
    script = static.joinpath("dashboard.js").read_text(encoding="utf-8")
    page = static.joinpath("dashboard.html").read_text(encoding="utf-8")
    assert 'id="token-input"' in page and 'type="password"' in page
    assert "sessionStorage" in script and "localStorage" not in script
    assert "Authorization: `Bearer ${token}`" in script
    assert "response.status === 401" in script
