"""The response store's two backends, held to the same behaviour (quick tier): memory,
and a real Redis server (Debian's redis-server, started for the module)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from gateway.redis_store import RedisStore
from gateway.response_store import MemoryStore, ResponseStore, StoreBounds, StoredResponse
from tests.debian_tools import DebianPrograms
from tests.fake_clock import FakeClock
from tests.redis_server import RedisServer, running_redis

BOUNDS = StoreBounds(max_entries=3, max_bytes=1_000_000, ttl_s=60.0)


def stored(response_id: str, text: str = "hi", pad: int = 0) -> StoredResponse:
    output = [
        {"type": "message", "id": f"msg_{response_id}", "role": "assistant", "content": []},
        {"type": "function_call", "id": f"fc_{response_id}", "call_id": "c", "arguments": ""},
    ]
    response = {"id": response_id, "object": "response", "output": output, "pad": "x" * pad}
    return StoredResponse(response=response, input_items=[{"role": "user", "content": text}])


@pytest.fixture(scope="module")
def redis_server(
    debian_programs: DebianPrograms, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    executable = debian_programs.path("redis-server")
    with running_redis(executable, tmp_path_factory.mktemp("redis")) as server:
        yield server


StoreFactory = Callable[[StoreBounds], ResponseStore]


@pytest.fixture(params=["memory", "redis"])
async def make_store(
    request: pytest.FixtureRequest, clock: FakeClock
) -> AsyncIterator[StoreFactory]:
    made: list[ResponseStore] = []

    def make(bounds: StoreBounds) -> ResponseStore:
        if request.param == "memory":
            store: ResponseStore = MemoryStore(bounds, clock)
        else:
            server: RedisServer = request.getfixturevalue("redis_server")
            server.flush()
            store = RedisStore(server.url, bounds, clock=clock)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


async def test_put_get_item_delete(make_store: StoreFactory) -> None:
    store = make_store(BOUNDS)
    await store.put("a", stored("r1"))
    got = await store.get("a", "r1")
    assert got is not None and got.response["id"] == "r1"
    assert got.input_items == [{"role": "user", "content": "hi"}]
    item = await store.item("a", "fc_r1")
    assert item is not None and item["type"] == "function_call"
    assert await store.delete("a", "r1")
    assert await store.get("a", "r1") is None
    assert await store.item("a", "msg_r1") is None
    assert not await store.delete("a", "r1")
    assert store.size() == (0, 0)


async def test_an_entry_is_its_owners_only(make_store: StoreFactory) -> None:
    store = make_store(BOUNDS)
    await store.put("a", stored("r1"))
    assert await store.get("b", "r1") is None
    assert await store.item("b", "msg_r1") is None
    assert not await store.delete("b", "r1")
    assert await store.get("a", "r1") is not None


async def test_the_oldest_go_first_past_max_entries(make_store: StoreFactory) -> None:
    store = make_store(BOUNDS)
    for i in range(5):
        await store.put("a", stored(f"r{i}"))
    assert [await store.get("a", f"r{i}") is not None for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert await store.item("a", "msg_r0") is None
    assert store.size()[0] == 3


async def test_the_oldest_go_first_past_max_bytes(make_store: StoreFactory) -> None:
    size = len(stored("r0", pad=1000).encode())
    store = make_store(StoreBounds(max_entries=100, max_bytes=2 * size + 10, ttl_s=60.0))
    for i in range(4):
        await store.put("a", stored(f"r{i}", pad=1000))
    assert [await store.get("a", f"r{i}") is not None for i in range(4)] == [
        False,
        False,
        True,
        True,
    ]
    entries, num_bytes = store.size()
    assert entries == 2 and num_bytes == 2 * size


async def test_an_entry_expires_after_its_time_to_live(
    make_store: StoreFactory, clock: FakeClock
) -> None:
    store = make_store(BOUNDS)
    await store.put("a", stored("old"))
    clock.advance(61.0)
    await store.put("a", stored("new"))  # a write evicts what has expired
    assert await store.get("a", "old") is None
    assert await store.get("a", "new") is not None
    assert store.size()[0] == 1


async def test_storing_one_id_again_replaces_it(make_store: StoreFactory) -> None:
    store = make_store(BOUNDS)
    await store.put("a", stored("r1", text="first"))
    await store.put("a", stored("r1", text="second"))
    got = await store.get("a", "r1")
    assert got is not None and got.input_items[0]["content"] == "second"
    assert store.size() == (1, len(stored("r1", text="second").encode()))


async def test_ten_thousand_responses_stay_within_the_bounds(make_store: StoreFactory) -> None:
    bounds = StoreBounds(max_entries=10_000, max_bytes=2_000_000, ttl_s=3600.0)
    store = make_store(bounds)
    for i in range(10_500):
        await store.put(f"k{i % 3}", stored(f"r{i}"))
    entries, num_bytes = store.size()
    assert entries <= bounds.max_entries and num_bytes <= bounds.max_bytes
    assert await store.get("k2", "r10499") is not None  # the newest stays
    assert await store.get("k0", "r0") is None


async def test_one_response_over_the_byte_bound_is_refused(make_store: StoreFactory) -> None:
    from gateway.response_store import EntryTooLargeError

    store = make_store(StoreBounds(max_entries=10, max_bytes=2000, ttl_s=60.0))
    await store.put("a", stored("kept"))
    with pytest.raises(EntryTooLargeError):
        await store.put("a", stored("big", pad=5000))
    assert await store.get("a", "kept") is not None and store.size()[0] == 1
