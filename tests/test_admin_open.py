"""``serve`` warns when it listens beyond loopback with /admin open (event ``admin_open``,
no admin token) or /v1 open (event ``api_open``, no API keys)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway import server
from gateway.server import warn_if_admin_open, warn_if_api_open
from gateway.settings import Settings
from tests.fakes import FakeEngine
from tests.log_records import records_fixture  # noqa: F401 (the records fixture)


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gateway.example"])
def test_warns_beyond_loopback_without_admin_token(
    host: str, records: list[logging.LogRecord]
) -> None:
    assert warn_if_admin_open(_settings(host=host)) is True
    (record,) = records
    assert record.levelno == logging.WARNING
    assert record.__dict__["event"] == "admin_open" and record.__dict__["host"] == host
    assert "DLFP_ADMIN_TOKEN" in record.getMessage()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_silent_on_loopback(host: str, records: list[logging.LogRecord]) -> None:
    assert warn_if_admin_open(_settings(host=host)) is False
    assert records == []


def test_silent_with_an_admin_token(records: list[logging.LogRecord]) -> None:
    assert warn_if_admin_open(_settings(host="0.0.0.0", admin_token="s3cret")) is False
    assert records == []


def test_the_default_settings_do_not_warn(
    records: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DLFP_HOST", "DLFP_ADMIN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert warn_if_admin_open(_settings()) is False
    assert records == []


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gateway.example"])
def test_api_open_beyond_loopback_without_api_keys(
    host: str, records: list[logging.LogRecord]
) -> None:
    assert warn_if_api_open(_settings(host=host, admin_token="s3cret")) is True
    (record,) = records
    assert record.levelno == logging.WARNING
    assert record.__dict__["event"] == "api_open" and record.__dict__["host"] == host
    assert "DLFP_API_KEYS" in record.getMessage()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_api_open_is_silent_on_loopback(host: str, records: list[logging.LogRecord]) -> None:
    assert warn_if_api_open(_settings(host=host)) is False
    assert records == []


@pytest.mark.parametrize("keys", ["k1", "k1, k2"])
def test_api_open_is_silent_with_keys(keys: str, records: list[logging.LogRecord]) -> None:
    assert warn_if_api_open(_settings(host="0.0.0.0", api_keys=keys)) is False
    assert records == []


def test_api_open_counts_keys_not_commas(records: list[logging.LogRecord]) -> None:
    assert warn_if_api_open(_settings(host="0.0.0.0", api_keys=" , ")) is True


def _serve_start_only(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The FAKE engine and a server that returns at once: only the start-up path runs.
    Returns the uvicorn configs the server was built with."""
    configs: list[Any] = []
    monkeypatch.setattr(server, "configure_logging", lambda level: None)
    monkeypatch.setattr(server, "build_engine", lambda *args, **kwargs: FakeEngine())
    monkeypatch.setattr(
        server.GatewayServer, "run", lambda self, sockets=None: configs.append(self.config)
    )
    return configs


def test_serve_warns_at_start(
    records: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    _serve_start_only(monkeypatch)
    assert server.serve(_settings(host="0.0.0.0", device="cpu")) == 0
    events = [r.__dict__.get("event") for r in records]
    assert events.index("gateway_start") < events.index("admin_open")
    assert events.index("gateway_start") < events.index("api_open")


def test_serve_with_keys_and_token_does_not_warn(
    records: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    _serve_start_only(monkeypatch)
    settings = _settings(host="0.0.0.0", device="cpu", api_keys="k1", admin_token="t")
    assert server.serve(settings) == 0
    events = {r.__dict__.get("event") for r in records}
    assert "gateway_start" in events and not events & {"admin_open", "api_open"}


def test_uvicorn_admits_far_more_connections_than_admission_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configs = _serve_start_only(monkeypatch)
    settings = _settings(device="cpu", max_concurrent=8, max_queue=20)
    assert server.serve(settings) == 0
    (config,) = configs
    # Idle connections count in uvicorn's limit: it bounds descriptors, far above
    # what admission admits and queues, and the head time-out frees idle ones.
    assert config.limit_concurrency == settings.max_connections >= 100 * (8 + 20)
    assert config.timeout_graceful_shutdown == server.UVICORN_SHUTDOWN_S
