"""A tenant's request and token rates, in this process and in a real Redis shared by two
gateways (quick tier, Debian's redis-server): the 429 names its limit, and a retry after
its ``Retry-After`` passes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from gateway.admission import AdmissionRejected
from gateway.errors import APIError
from gateway.tenant_limits import TenantLimits
from gateway.tenant_rates import MemoryRates, Rates, RedisRates
from tests.debian_tools import DebianPrograms
from tests.fake_clock import FakeClock
from tests.redis_server import RedisServer, running_redis


@pytest.fixture(scope="module")
def redis_server(
    debian_programs: DebianPrograms, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    with running_redis(debian_programs.path("redis-server"), tmp_path_factory.mktemp("redis")) as s:
        yield s


RatesFactory = Callable[[], Rates]


@pytest.fixture(params=["memory", "redis"])
async def make_rates(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[RatesFactory, FakeClock]]:
    clock = FakeClock(1_000_000.0)
    made: list[Rates] = []
    memory = MemoryRates(clock)
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        server.flush()

    def make() -> Rates:
        if request.param == "memory":
            return memory  # one process: every caller shares it
        rates = RedisRates(server.url, clock)
        made.append(rates)
        return rates

    yield make, clock
    for rates in made:
        await rates.close()


async def test_requests_per_minute_refuses_and_a_retry_after_its_wait_passes(
    make_rates: tuple[RatesFactory, FakeClock],
) -> None:
    make, clock = make_rates
    limits = TenantLimits(requests_per_minute=3)
    first, second = make(), make()  # two replicas, where Redis is shared
    await first.admit("a", limits, 10)
    clock.advance(10)
    await second.admit("a", limits, 10)
    await first.admit("a", limits, 10)
    with pytest.raises(AdmissionRejected) as refused:
        await second.admit("a", limits, 10)
    assert refused.value.reason == "tenant_requests_per_minute"
    assert "requests_per_minute" in str(refused.value)
    assert refused.value.retry_after_s == 50  # the first request leaves the window then
    await first.admit("b", limits, 10)  # another tenant is not charged for a's
    clock.advance(refused.value.retry_after_s)
    await second.admit("a", limits, 10)


async def test_tokens_are_charged_as_they_happen_and_the_wait_is_exact(
    make_rates: tuple[RatesFactory, FakeClock],
) -> None:
    make, clock = make_rates
    limits = TenantLimits(tokens_per_minute=1000)
    rates = make()
    await rates.admit("a", limits, 600)  # prompt + max_tokens fit; nothing charged yet
    await rates.charge_tokens("a", 300)  # the prompt, at admission
    clock.advance(20)
    await rates.charge_tokens("a", 400)  # completion tokens, as they streamed
    with pytest.raises(AdmissionRejected) as refused:
        await make().admit("a", limits, 400)
    assert refused.value.reason == "tenant_tokens_per_minute"
    assert refused.value.retry_after_s == 40  # the prompt's 300 leave the window then
    clock.advance(39)
    with pytest.raises(AdmissionRejected):
        await rates.admit("a", limits, 400)
    clock.advance(1)
    await rates.admit("a", limits, 400)


async def test_a_request_no_minute_could_hold_is_a_400(
    make_rates: tuple[RatesFactory, FakeClock],
) -> None:
    make, _ = make_rates
    with pytest.raises(APIError) as error:
        await make().admit("a", TenantLimits(tokens_per_minute=100), 101)
    assert error.value.status == 400 and "tokens_per_minute" in str(error.value)
