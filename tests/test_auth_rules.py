"""Which clients /admin answers without a token (quick tier, FAKE engine): 127.0.0.1 and
::1 only, not the rest of 127.0.0.0/8 (a sidecar proxy's 127.0.0.6), unless
``DLFP_TRUSTED_PROXIES`` names them; and the start-up warning when it does."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

import httpx
import pytest

from gateway import server
from gateway.auth import is_local_client
from gateway.cli import main
from gateway.server import warn_if_admin_open
from gateway.settings import Settings
from tests.http_helpers import fake_client
from tests.log_records import records_fixture  # noqa: F401 (the records fixture)


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("host", "trusted", "is_local"),
    [
        ("127.0.0.1", "", True),
        ("::1", "", True),
        ("::ffff:127.0.0.1", "", True),
        ("127.0.0.6", "", False),  # Istio's inbound sidecar
        ("127.0.0.2", "", False),
        ("10.0.0.1", "", False),
        ("::ffff:10.0.0.1", "", False),
        ("127.0.0.6", "127.0.0.6", True),
        ("10.0.0.1", "10.0.0.0/8", True),
        ("::ffff:10.0.0.1", "10.0.0.0/8", True),
        ("10.0.0.1", "192.168.0.0/16, fd00::/8", False),
        ("fd00::7", "192.168.0.0/16, fd00::/8", True),
    ],
)
def test_local_means_127_0_0_1_and_1_or_a_trusted_proxy(
    host: str, trusted: str, is_local: bool
) -> None:
    networks = _settings(trusted_proxies=trusted).trusted_proxy_networks()
    assert is_local_client(host, networks) is is_local


@pytest.mark.parametrize(
    ("host", "trusted", "status"),
    [
        ("127.0.0.1", "", 200),
        ("::1", "", 200),
        ("127.0.0.6", "", 403),
        ("10.0.0.1", "", 403),
        ("127.0.0.6", "127.0.0.6", 200),
        ("10.0.0.1", "10.0.0.0/8", 200),
        ("10.1.2.3", "10.0.0.0/24", 403),
    ],
)
async def test_admin_without_a_token_answers_local_clients_only(
    host: str, trusted: str, status: int
) -> None:
    async with fake_client(trusted_proxies=trusted) as (_, app, _):
        transport = httpx.ASGITransport(app=app, client=(host, 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.get("/admin/dlfp")
            assert r.status_code == status, r.text


async def test_a_trusted_proxy_still_needs_the_token_once_one_is_set() -> None:
    async with fake_client(admin_token="s3cret", trusted_proxies="10.0.0.0/8") as (_, app, _):
        for host in ("127.0.0.1", "10.0.0.1"):
            transport = httpx.ASGITransport(app=app, client=(host, 4000))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert (await client.get("/admin/dlfp")).status_code == 401, host
                r = await client.get("/admin/dlfp", headers={"Authorization": "Bearer s3cret"})
                assert r.status_code == 200, host


def test_trusted_proxies_are_listed_by_commas_or_lines() -> None:
    settings = _settings(trusted_proxies=" 127.0.0.6,\n10.0.0.0/8\r\n\nfd00::/8 ,")
    assert settings.trusted_proxy_networks() == (
        ipaddress.ip_network("127.0.0.6/32"),
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert _settings().trusted_proxy_networks() == ()


@pytest.mark.parametrize("value", ["gateway.example", "10.0.0.1/8", "300.0.0.1"])
def test_a_bad_trusted_proxy_stops_serve_with_one_line(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(server, "serve", lambda settings: 0)  # never an engine here
    monkeypatch.setenv("DLFP_TRUSTED_PROXIES", value)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "DLFP_TRUSTED_PROXIES" in err and value in err and "Traceback" not in err


def test_trusted_proxies_without_a_token_warn_even_on_loopback(
    records: list[logging.LogRecord],
) -> None:
    assert warn_if_admin_open(_settings(host="127.0.0.1", trusted_proxies="127.0.0.6")) is True
    (record,) = records
    assert record.levelno == logging.WARNING and record.__dict__["event"] == "admin_open"
    assert record.__dict__["trusted_proxies"] == ["127.0.0.6/32"]
    assert "DLFP_TRUSTED_PROXIES" in record.getMessage()
    assert "DLFP_ADMIN_TOKEN" in record.getMessage()


def test_trusted_proxies_with_a_token_do_not_warn(records: list[logging.LogRecord]) -> None:
    settings = _settings(host="0.0.0.0", trusted_proxies="10.0.0.0/8", admin_token="s3cret")
    assert warn_if_admin_open(settings) is False
    assert records == []
