"""The secret settings (quick tier): key files one key a line or comma-separated, an
empty admin-token file refused at start, an empty api-keys or metrics-token file open and
logged as such, and no secret variable left in the environment the engine's processes
inherit."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway import server
from gateway.cli import main
from gateway.settings import SECRET_FIELDS, Settings, SettingsError
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client
from tests.log_records import captured

SECRETS = {f"DLFP_{name.upper()}{suffix}" for name in SECRET_FIELDS for suffix in ("", "_FILE")}
"""Every variable that carries a secret or names its file."""
REAL_SERVE = server.serve


@pytest.fixture(autouse=True)
def _no_secret_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper() in SECRETS:
            monkeypatch.delenv(name)
    # No engine starts here: `main(["serve"])` past its settings gets 0 at once, and the
    # tests that run serve() give it the FAKE engine and a server that returns at once.
    monkeypatch.setattr(server, "serve", lambda settings: 0)


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- key lists ---


@pytest.mark.parametrize(
    "text",
    [
        "k1\nk2\nk3\n",  # one a line, as `openssl rand -hex 32 >> api_keys` leaves them
        "k1\r\nk2\r\nk3\r\n",  # written on Windows
        "\n  k1  \n\n\tk2\n k3\n\n",  # blank lines and surrounding whitespace
        "k1,k2,k3",
        " k1 , k2,\nk3 ,\n",  # both
    ],
)
def test_a_key_file_holds_one_key_a_line_or_commas(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLFP_API_KEYS_FILE", _file(tmp_path, "api_keys", text))
    monkeypatch.setenv("DLFP_PRIORITY_API_KEYS_FILE", _file(tmp_path, "priority", text))
    settings = _settings()
    assert settings.api_key_set() == {"k1", "k2", "k3"}
    assert settings.priority_key_set() == {"k1", "k2", "k3"}


def test_the_key_variables_take_lines_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Kubernetes Secret key written line by line, passed as a variable.
    monkeypatch.setenv("DLFP_API_KEYS", "k1\nk2\n")
    monkeypatch.setenv("DLFP_PRIORITY_API_KEYS", "k2\n")
    settings = _settings()
    assert settings.api_key_set() == {"k1", "k2"} and settings.priority_key_set() == {"k2"}


async def test_every_key_of_a_key_file_opens_v1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLFP_API_KEYS_FILE", _file(tmp_path, "api_keys", "k1\nk2\n"))
    async with fake_client() as (client, _, _):
        for key in ("k1", "k2"):
            r = await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, key
        assert (await client.get("/v1/models")).status_code == 401
        r = await client.get("/v1/models", headers={"Authorization": "Bearer k1\nk2"})
        assert r.status_code == 401


# --- empty files ---


@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n"])
def test_an_empty_admin_token_file_stops_serve(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, "admin_token", text)
    monkeypatch.setenv("DLFP_ADMIN_TOKEN_FILE", path)
    with pytest.raises(SettingsError, match="DLFP_ADMIN_TOKEN_FILE"):
        _settings()
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "DLFP_ADMIN_TOKEN_FILE" in err and path in err and "is empty" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_admin_token_is_refused_however_given(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--admin-token", value]) == 2
    monkeypatch.setenv("DLFP_ADMIN_TOKEN", value)
    assert main(["serve"]) == 2
    assert capsys.readouterr().err.count("admin_token") == 2


def _start_only(monkeypatch: pytest.MonkeyPatch, build: Callable[..., FakeEngine]) -> None:
    """``serve`` runs up to the server's run, which returns at once; ``build`` makes its
    engine."""
    monkeypatch.setattr(server, "serve", REAL_SERVE)
    monkeypatch.setattr(server, "configure_logging", lambda level: None)
    monkeypatch.setattr(server, "build_engine", build)
    monkeypatch.setattr(server.GatewayServer, "run", lambda self, sockets=None: None)


def test_empty_api_keys_and_metrics_token_files_are_open_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLFP_API_KEYS_FILE", _file(tmp_path, "api_keys", "\n"))
    monkeypatch.setenv("DLFP_METRICS_TOKEN_FILE", _file(tmp_path, "metrics_token", ""))
    settings = _settings(host="0.0.0.0", device="cpu")
    assert settings.api_key_set() == frozenset() and settings.metrics_token is None
    _start_only(monkeypatch, lambda *args, **kwargs: FakeEngine())
    with captured(server.logger) as records:
        assert server.serve(settings) == 0
    by_event = {r.__dict__.get("event"): r for r in records}
    assert by_event["api_open"].levelno == logging.WARNING
    assert by_event["metrics_open"].levelno == logging.INFO
    assert "DLFP_METRICS_TOKEN" in by_event["metrics_open"].getMessage()


# --- the environment the engine inherits ---

_CHILD_SEES = "import json, os; print(json.dumps(sorted(os.environ)))"
"""A child process's view of the environment it inherited."""


def test_the_engine_processes_inherit_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each secret by variable or by file, one of them spelt in lower case (the settings
    read either), loaded as ``serve`` loads them; then what the engine is built with."""
    monkeypatch.setenv("DLFP_ADMIN_TOKEN", "adm1n")
    monkeypatch.setenv("DLFP_API_KEYS_FILE", _file(tmp_path, "api_keys", "k1\nk2\n"))
    monkeypatch.setenv("DLFP_PRIORITY_API_KEYS", "k2")
    monkeypatch.setenv("DLFP_METRICS_TOKEN_FILE", _file(tmp_path, "metrics_token", "scr4pe"))
    monkeypatch.setenv("dlfp_redis_url", "redis://:pw@redis:6379/0")
    monkeypatch.setenv("DLFP_DEVICE", "cpu")  # not a secret: stays
    seen: dict[str, Any] = {}

    def build(settings: Settings, *args: Any, **kwargs: Any) -> FakeEngine:
        seen["environ"] = dict(os.environ)
        child = subprocess.run(
            [sys.executable, "-c", _CHILD_SEES], capture_output=True, text=True, check=True
        )
        seen["child"] = json.loads(child.stdout)
        seen["settings"] = settings
        return FakeEngine()

    _start_only(monkeypatch, build)
    assert main(["serve"]) == 0
    assert not {name for name in seen["environ"] if name.upper() in SECRETS}
    assert "DLFP_DEVICE" in seen["child"]
    assert not {name for name in seen["child"] if name.upper() in SECRETS}
    assert not {name for name in os.environ if name.upper() in SECRETS}
    # Read before they went: the gateway itself still holds every secret.
    settings: Settings = seen["settings"]
    assert settings.admin_token is not None and settings.metrics_token is not None
    assert settings.redis_url is not None
    assert settings.admin_token.get_secret_value() == "adm1n"
    assert settings.api_key_set() == {"k1", "k2"} and settings.priority_key_set() == {"k2"}
    assert settings.metrics_token.get_secret_value() == "scr4pe"
    assert settings.redis_url.get_secret_value() == "redis://:pw@redis:6379/0"
