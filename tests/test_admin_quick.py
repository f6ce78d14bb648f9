"""/admin/dlfp on the FAKE engine: auth, validation, merge rules (quick tier)."""

from __future__ import annotations

import httpx

from tests.http_helpers import fake_client

AUTH = {"Authorization": "Bearer s3cret"}


async def test_auth_rules_with_token() -> None:
    async with fake_client(admin_token="s3cret") as (client, _, _):
        assert (await client.get("/admin/dlfp")).status_code == 401
        r = await client.get("/admin/dlfp", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
        r = await client.get("/admin/dlfp", headers=AUTH)
        assert r.status_code == 200
        assert set(r.json()) == {"settings", "state"}


async def test_no_token_means_loopback_only() -> None:
    async with fake_client() as (client, app, _):
        assert (await client.get("/admin/dlfp")).status_code == 200
        remote = httpx.ASGITransport(app=app, client=("192.0.2.7", 4000))
        async with httpx.AsyncClient(transport=remote, base_url="http://testserver") as other:
            r = await other.get("/admin/dlfp")
            assert r.status_code == 403 and "error" in r.json()


async def test_invalid_changes_are_422_and_change_nothing() -> None:
    async with fake_client(admin_token="s3cret") as (client, _app, engine):
        before = (await client.get("/admin/dlfp", headers=AUTH)).json()["settings"]
        bad = [
            {"gain": 1.5},
            {"gain": 0},
            {"target_ms": -1},
            {"controller": "pid"},
            {"min_cap_tokens": 64, "initial_cap_tokens": 32},
            {"fixed_cap_tokens": 100000},
            {"initial_cap_tokens": 129},
            {"no_such_field": 1},
        ]
        for patch in bad:
            r = await client.patch("/admin/dlfp", json=patch, headers=AUTH)
            assert r.status_code == 422, (patch, r.text)
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        r = await client.put("/admin/dlfp", json={"gain": 0.3}, headers=AUTH)
        assert r.status_code == 422
        r = await client.put("/admin/dlfp", json=before | {"gain": 7}, headers=AUTH)
        assert r.status_code == 422
        r = await client.patch(
            "/admin/dlfp", content=b"[1,2]", headers=AUTH | {"content-type": "application/json"}
        )
        assert r.status_code == 422
        after = (await client.get("/admin/dlfp", headers=AUTH)).json()["settings"]
        assert after == before
        assert engine.dlfp_config.model_dump(mode="json") == before


async def test_valid_patch_and_put_apply_and_count() -> None:
    async with fake_client(admin_token="s3cret") as (client, _app, engine):
        r = await client.patch(
            "/admin/dlfp", json={"target_ms": 150, "controller": "fixed"}, headers=AUTH
        )
        assert r.status_code == 200
        assert (
            r.json()["settings"]["target_ms"] == 150
            and r.json()["settings"]["controller"] == "fixed"
        )
        assert engine.dlfp_config.target_ms == 150
        whole = r.json()["settings"] | {"gain": 0.25}
        r = await client.put("/admin/dlfp", json=whole, headers=AUTH)
        assert r.status_code == 200 and engine.dlfp_config.gain == 0.25
        metrics = (await client.get("/metrics")).text
        assert "dlfp_admin_changes_total 2.0" in metrics
        assert "dlfp_controller_target_seconds 0.15" in metrics


async def test_admin_values_must_be_finite_and_above_their_floors() -> None:
    async with fake_client(admin_token="s3cret") as (client, _app, engine):
        before = (await client.get("/admin/dlfp", headers=AUTH)).json()["settings"]
        json_headers = AUTH | {"content-type": "application/json"}
        for raw in (b'{"ttft_slo_ms": Infinity}', b'{"itl_slo_ms": NaN}', b'{"gain": NaN}'):
            r = await client.patch("/admin/dlfp", content=raw, headers=json_headers)
            assert r.status_code == 422, (raw, r.text)
        for patch in (
            {"ttft_slo_ms": 0.001},
            {"itl_slo_ms": 0.5},
            {
                "step_tokens": 1,
                "min_cap_tokens": 1,
                "initial_cap_tokens": 1,
                "fixed_cap_tokens": 1,
                "max_cap_tokens": 1,
            },
            {"min_cap_tokens": 1, "step_tokens": 1},
            {"gain": 0.0001},
        ):
            r = await client.patch("/admin/dlfp", json=patch, headers=AUTH)
            assert r.status_code == 422, (patch, r.text)
        r = await client.patch(
            "/admin/admission", content=b'{"max_queue_wait_s": Infinity}', headers=json_headers
        )
        assert r.status_code == 422
        after = (await client.get("/admin/dlfp", headers=AUTH)).json()["settings"]
        assert after == before and engine.dlfp_config.model_dump(mode="json") == before
        r = await client.put("/admin/dlfp", json=after, headers=AUTH)  # GET's view round-trips
        assert r.status_code == 200


async def test_reset_keeps_the_model_unless_model_true() -> None:
    async with fake_client(admin_token="s3cret") as (client, _app, engine):
        r = await client.post("/admin/dlfp/reset", headers=AUTH)
        assert r.status_code == 200 and engine.num_dlfp_resets == 1
        assert engine.last_reset_model is False
        r = await client.post("/admin/dlfp/reset", params={"model": "true"}, headers=AUTH)
        assert r.status_code == 200 and engine.last_reset_model is True
        assert r.json()["state"]["plan"] == "deadline"
        r = await client.post("/admin/dlfp/reset", params={"model": "maybe"}, headers=AUTH)
        assert r.status_code == 422 and "error" in r.json()
        assert engine.num_dlfp_resets == 2
