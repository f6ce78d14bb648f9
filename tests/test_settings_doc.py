"""docs/settings.md is the generator's output, and the generator reads the models
right (quick tier)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine_worker.contract.device_defaults import defaults_for
from engine_worker.contract.dlfp_config import DLFPConfig
from gateway.admission import AdmissionLimits
from gateway.cli import main
from gateway.settings import Settings
from gateway.settings_doc import option, render, type_text

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "settings.md"


def test_committed_page_is_the_generated_one() -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "gateway.settings_doc"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert generated == render()
    assert PAGE.read_text() == generated, (
        "docs/settings.md is stale: run `python -m gateway.settings_doc > docs/settings.md`"
    )


def test_every_setting_has_a_row_with_an_option_serve_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = render()
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = capsys.readouterr().out
    for name, info in Settings.model_fields.items():
        assert f"| `{name}` | `DLFP_{name.upper()}` |" in page
        for flag in option(name, info.annotation).split(" / "):
            assert flag.split()[0] in help_text, flag


def test_types_and_bounds_come_from_the_fields() -> None:
    def typed(model: type[Settings] | type[DLFPConfig] | type[AdmissionLimits], name: str) -> str:
        info = model.model_fields[name]
        return type_text(info.annotation, info.metadata)

    assert typed(Settings, "port") == "integer, 0 to 65535"
    assert typed(Settings, "log_level") == "one of `debug`, `info`, `warning` or `error`"
    assert typed(Settings, "tool_call_parser") == "text, non-empty"
    assert typed(Settings, "chat_template") == "path of an existing file"
    assert typed(DLFPConfig, "target_ms") == "number, 1 to 60000, or `auto`"
    assert typed(DLFPConfig, "controller") == "one of `off`, `fixed`, `dlfp` or `dlfp-ct`"
    assert typed(AdmissionLimits, "max_queue_wait_s") == "number, > 0, <= 3600"
    assert option("feedforward", Settings.model_fields["feedforward"].annotation) == (
        "--feedforward / --no-feedforward"
    )


def test_per_device_defaults_are_both_shown() -> None:
    cpu, cuda = defaults_for("cpu").dlfp, defaults_for("cuda").dlfp
    row = next(line for line in render().splitlines() if line.startswith("| `step_tokens` |"))
    assert f"| `{cpu.step_tokens}` | `{cuda.step_tokens}` |" in row
