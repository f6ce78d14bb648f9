"""Stored responses over HTTP on the FAKE engine (quick tier): conversations through
``previous_response_id`` and ``item_reference``, GET and DELETE, key scope, bounds in
/metrics, and two gateways sharing a real Redis (Debian's redis-server), which stops."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.debian_tools import DebianPrograms
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json
from tests.redis_server import RedisServer, running_redis

BODY: Any = {"model": "fake-model", "max_output_tokens": 3}
FAKE_REPLY = "fake token stream"


async def _turn(client: httpx.AsyncClient, text: str, **extra: Any) -> dict[str, Any]:
    r = await client.post("/v1/responses", json=BODY | {"input": text} | extra)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


def _conversation(engine: FakeEngine) -> list[tuple[str, str]]:
    """What the engine was last asked: (role, content) of each message."""
    return [(m["role"], m["content"]) for m in engine.output_requests[-1]["messages"]]


async def test_three_turns_through_previous_response_id() -> None:
    async with fake_client() as (client, _, engine):
        first = await _turn(client, "one")
        assert first["store"] is True
        second = await _turn(client, "two", previous_response_id=first["id"])
        assert second["previous_response_id"] == first["id"]
        r = await client.post(
            "/v1/responses",
            json=BODY | {"input": "three", "previous_response_id": second["id"], "stream": True},
        )
        assert r.status_code == 200
        assert _conversation(engine) == [
            ("user", "one"),
            ("assistant", FAKE_REPLY),
            ("user", "two"),
            ("assistant", FAKE_REPLY),
            ("user", "three"),
        ]
        third_id = sse_json(r.text)[-1]["response"]["id"]
        stored = (await client.get(f"/v1/responses/{third_id}")).json()
        assert stored["status"] == "incomplete" and stored["output"][0]["content"][0]["text"]


async def test_item_reference_brings_back_an_earlier_output_item() -> None:
    async with fake_client() as (client, _, engine):
        first = await _turn(client, "one")
        item_id = first["output"][0]["id"]
        assert item_id.startswith("msg_")
        items = [
            {"role": "user", "content": "one"},
            {"type": "item_reference", "id": item_id},
            {"role": "user", "content": "two"},
        ]
        r = await client.post("/v1/responses", json=BODY | {"input": items})
        assert r.status_code == 200, r.text
        assert _conversation(engine)[1] == ("assistant", FAKE_REPLY)
        missing = [{"type": "item_reference", "id": "msg_unknown"}]
        r = await client.post("/v1/responses", json=BODY | {"input": missing})
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["param"] == "input.0" and "msg_unknown" in error["message"]


async def test_get_replay_delete_and_store_false() -> None:
    async with fake_client() as (client, _, _):
        first = await _turn(client, "one")
        got = await client.get(f"/v1/responses/{first['id']}")
        assert got.status_code == 200 and got.json() == first
        replay = await client.get(f"/v1/responses/{first['id']}?stream=true&starting_after=1")
        events = sse_json(replay.text)
        assert events[0]["sequence_number"] == 2
        assert events[-1]["type"] == "response.incomplete"
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        assert "".join(deltas) == FAKE_REPLY

        deleted = await client.delete(f"/v1/responses/{first['id']}")
        assert deleted.json() == {"id": first["id"], "object": "response", "deleted": True}
        assert (await client.get(f"/v1/responses/{first['id']}")).status_code == 404
        assert (await client.delete(f"/v1/responses/{first['id']}")).status_code == 404
        r = await client.post(
            "/v1/responses", json=BODY | {"input": "x", "previous_response_id": first["id"]}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
        assert first["id"] in r.json()["error"]["message"]

        unstored = await _turn(client, "one", store=False)
        assert unstored["store"] is False
        assert (await client.get(f"/v1/responses/{unstored['id']}")).status_code == 404


async def test_a_response_is_its_keys_only() -> None:
    async with fake_client(api_keys="key-a,key-b") as (client, _, _):
        a, b = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
        r = await client.post("/v1/responses", json=BODY | {"input": "x"}, headers=a)
        response_id = r.json()["id"]
        assert (await client.get(f"/v1/responses/{response_id}", headers=a)).status_code == 200
        assert (await client.get(f"/v1/responses/{response_id}", headers=b)).status_code == 404
        assert (await client.delete(f"/v1/responses/{response_id}", headers=b)).status_code == 404
        turn = BODY | {"input": "y", "previous_response_id": response_id}
        assert (await client.post("/v1/responses", json=turn, headers=b)).status_code == 400
        assert (await client.post("/v1/responses", json=turn, headers=a)).status_code == 200


async def test_the_bounds_hold_and_show_in_metrics() -> None:
    async with fake_client(response_store_max_entries=2) as (client, _, _):
        ids = [(await _turn(client, f"turn {i}"))["id"] for i in range(4)]
        found = [(await client.get(f"/v1/responses/{i}")).status_code for i in ids]
        assert found == [404, 404, 200, 200]
        metrics = (await client.get("/metrics")).text
        assert 'dlfp_response_store_entries{backend="memory"} 2.0' in metrics
        assert 'dlfp_response_store_bytes{backend="memory"}' in metrics


@pytest.fixture(scope="module")
def redis_executable(debian_programs: DebianPrograms) -> str:
    return debian_programs.path("redis-server")


@pytest.fixture
def redis_server(
    redis_executable: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    with running_redis(redis_executable, tmp_path_factory.mktemp("redis")) as server:
        yield server


async def test_two_gateways_sharing_redis_serve_each_others_turns(
    redis_server: RedisServer,
) -> None:
    shared = {"response_store": "redis", "redis_url": redis_server.url}
    async with (
        fake_client(**shared) as (one, _, _),
        fake_client(FakeEngine(), **shared) as (two, _, engine_two),
    ):
        first = await _turn(one, "one")
        second = await _turn(two, "two", previous_response_id=first["id"])
        await _turn(one, "three", previous_response_id=second["id"])
        item = {"type": "item_reference", "id": second["output"][0]["id"]}
        r = await two.post("/v1/responses", json=BODY | {"input": [item]})
        assert r.status_code == 200, r.text
        assert _conversation(engine_two) == [("assistant", FAKE_REPLY)]
        assert (await two.get(f"/v1/responses/{first['id']}")).json() == first
        metrics = (await two.get("/metrics")).text
        assert 'dlfp_response_store_entries{backend="redis"} 4.0' in metrics


async def test_a_redis_that_goes_away_is_a_503_for_what_needs_it(
    redis_server: RedisServer,
) -> None:
    async with fake_client(response_store="redis", redis_url=redis_server.url) as (
        client,
        _,
        _,
    ):
        first = await _turn(client, "one")
        redis_server.stop()
        turn = BODY | {"input": "two", "previous_response_id": first["id"]}
        r = await client.post("/v1/responses", json=turn)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "store_unavailable"
        assert r.headers["retry-after"] == "5"
        assert (await client.get(f"/v1/responses/{first['id']}")).status_code == 503
        # Calls that need no stored response keep working; what cannot be stored is logged.
        await _turn(client, "plain", store=False)
        await _turn(client, "plain, kept if it could be")
        chat = {
            "model": "fake-model",
            "max_tokens": 2,
            "messages": [{"role": "user", "content": "x"}],
        }
        assert (await client.post("/v1/chat/completions", json=chat)).status_code == 200
