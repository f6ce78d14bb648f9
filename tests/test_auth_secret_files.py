"""Secret settings read from the file a ``DLFP_<NAME>_FILE`` variable names (quick tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.settings import SECRET_FIELDS, Settings, SettingsError


@pytest.fixture(autouse=True)
def _no_secret_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SECRET_FIELDS:
        monkeypatch.delenv(f"DLFP_{name.upper()}", raising=False)
        monkeypatch.delenv(f"DLFP_{name.upper()}_FILE", raising=False)


def _settings() -> Settings:
    return Settings(_env_file=None)  # type: ignore[call-arg]


def test_every_secret_field_is_a_setting() -> None:
    assert set(SECRET_FIELDS) <= set(Settings.model_fields)


def test_secrets_come_from_their_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "admin_token": "adm1n",
        "api_keys": "k1,k2",
        "priority_api_keys": "k2",
        "metrics_token": "scr4pe",
    }
    for name, value in values.items():
        path = tmp_path / name
        path.write_text(value + "\n")  # as `echo` or `openssl rand -hex 32 >` leave it
        monkeypatch.setenv(f"DLFP_{name.upper()}_FILE", str(path))
    settings = _settings()
    assert settings.admin_token is not None and settings.metrics_token is not None
    assert settings.admin_token.get_secret_value() == "adm1n"
    assert settings.metrics_token.get_secret_value() == "scr4pe"
    assert settings.api_key_set() == {"k1", "k2"} and settings.priority_key_set() == {"k2"}
    # An option on the command line still wins.
    given = Settings(_env_file=None, api_keys="k9")  # type: ignore[call-arg]
    assert given.api_key_set() == {"k9"}


def test_an_empty_file_leaves_the_setting_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("api_keys", "metrics_token"):
        (tmp_path / name).write_text("\n")
        monkeypatch.setenv(f"DLFP_{name.upper()}_FILE", str(tmp_path / name))
    settings = _settings()
    assert settings.api_key_set() == frozenset() and settings.metrics_token is None


def test_a_variable_and_its_file_together_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "keys").write_text("k1")
    monkeypatch.setenv("DLFP_API_KEYS_FILE", str(tmp_path / "keys"))
    monkeypatch.setenv("DLFP_API_KEYS", "k2")
    with pytest.raises(SettingsError, match="DLFP_API_KEYS or DLFP_API_KEYS_FILE"):
        _settings()


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_unreadable_file_stops_serve_with_one_line(
    kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A compose secret whose file is missing can arrive as an empty directory.
    path = tmp_path / "admin_token"
    if kind == "directory":
        path.mkdir()
    monkeypatch.setenv("DLFP_ADMIN_TOKEN_FILE", str(path))
    with pytest.raises(SettingsError, match="DLFP_ADMIN_TOKEN_FILE: cannot read"):
        _settings()
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "DLFP_ADMIN_TOKEN_FILE" in err and "Traceback" not in err
