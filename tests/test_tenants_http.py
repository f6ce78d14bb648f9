"""Tenants over HTTP (quick tier, FAKE engine): /admin/tenants shows and changes their
limits, a tenant over its token rate gets 429 with a Retry-After, the metrics and the
request log line name the tenant (never a key), and DLFP_PRIORITY_API_KEYS still lets a
key ask for priorities below 0."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tests.http_helpers import fake_client
from tests.log_records import captured

CHAT: Any = {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
FILE = """\
[[tenant]]
name = "search"
keys = ["sk-search"]
weight = 3

[[tenant]]
name = "batch"
keys = ["sk-batch"]
priority = 5
"""


def key(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(FILE)
    return path


async def test_admin_shows_each_tenant_and_a_patch_changes_its_limits(tmp_path: Path) -> None:
    async with fake_client(tenants_file=tenants_file(tmp_path)) as (client, _, _):
        r = await client.get("/admin/tenants")
        assert r.status_code == 200, r.text
        shown = {t["name"]: t for t in r.json()["tenants"]}
        assert set(shown) == {"search", "batch"}
        assert shown["search"]["limits"]["weight"] == 3
        assert shown["batch"]["limits"]["priority"] == 5
        assert shown["search"]["use"] == {"slots": 0, "queued": 0}
        assert "sk-search" not in r.text
        r = await client.patch("/admin/tenants/batch", json={"max_concurrent": 2})
        assert r.status_code == 200, r.text
        assert r.json()["limits"]["max_concurrent"] == 2 and r.json()["limits"]["priority"] == 5
        r = await client.patch("/admin/tenants/batch", json={"weight": 0})
        assert r.status_code == 422 and r.json()["error"]["param"] == "weight"
        r = await client.patch("/admin/tenants/nobody", json={"weight": 2})
        assert r.status_code == 404
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 401
        r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-search"))
        assert r.status_code == 200, r.text


async def test_a_tenant_over_its_token_rate_gets_429_with_retry_after(tmp_path: Path) -> None:
    async with fake_client(tenants_file=tenants_file(tmp_path)) as (client, _, _):
        await client.patch("/admin/tenants/search", json={"tokens_per_minute": 40})
        statuses = []
        for _ in range(10):
            r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-search"))
            statuses.append(r.status_code)
            if r.status_code == 429:
                break
        assert statuses[0] == 200 and statuses[-1] == 429, statuses
        error = r.json()["error"]
        assert error["code"] == "tenant_tokens_per_minute"
        assert "tokens_per_minute" in error["message"]
        assert 1 <= int(r.headers["retry-after"]) <= 60
        other = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-batch"))
        assert other.status_code == 200  # another tenant is not charged for it
        huge = CHAT | {"max_tokens": 100}
        r = await client.post("/v1/chat/completions", json=huge, headers=key("sk-search"))
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


async def test_metrics_and_the_log_line_name_the_tenant(tmp_path: Path) -> None:
    async with fake_client(tenants_file=tenants_file(tmp_path)) as (client, _, _):
        with captured(logging.getLogger("dlfp.request")) as records:
            r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-batch"))
            assert r.status_code == 200
        finished = [rec for rec in records if getattr(rec, "event", "") == "request_finished"]
        assert [rec.tenant for rec in finished] == ["batch"]  # type: ignore[attr-defined]
        text = (await client.get("/metrics")).text
        assert 'dlfp_tenant_requests_total{outcome="ok",tenant="batch"} 1.0' in text
        assert 'dlfp_tenant_requests_total{outcome="ok",tenant="search"} 0.0' in text
        assert 'dlfp_tenant_slots_in_use{tenant="batch"} 0.0' in text
        assert 'dlfp_tenant_completion_tokens_total{tenant="batch"}' in text
        assert "sk-batch" not in text


async def test_priority_keys_still_raise_and_a_tenant_priority_is_its_default() -> None:
    settings = {"api_keys": "sk-a,sk-b", "priority_api_keys": "sk-b"}
    async with fake_client(**settings) as (client, app, _):
        urgent = {"X-Priority": "-1"}
        r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-a") | urgent)
        assert r.status_code == 403 and "DLFP_PRIORITY_API_KEYS" in r.json()["error"]["message"]
        r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-b") | urgent)
        assert r.status_code == 200, r.text
        names = [t["name"] for t in (await client.get("/admin/tenants")).json()["tenants"]]
        assert names == ["key-1", "key-2"]
        await client.patch("/admin/tenants/key-1", json={"priority": -2})
        r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-a"))
        assert r.status_code == 200  # its own default, below 0, is allowed
        assert app.state.gateway.tenants.get("key-1").limits.priority == -2


async def test_a_priority_key_raises_its_own_requests_not_its_tenants(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text('[[tenant]]\nname = "team"\nkeys = ["sk-lead", "sk-member"]\n')
    settings = {"tenants_file": path, "priority_api_keys": "sk-lead"}
    async with fake_client(**settings) as (client, _, _):
        urgent = {"X-Priority": "-1"}
        r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-lead") | urgent)
        assert r.status_code == 200, r.text
        r = await client.post("/v1/chat/completions", json=CHAT, headers=key("sk-member") | urgent)
        assert r.status_code == 403
