"""Settings declared once: the controller's and admission's fields are derived, and a bad
value stops ``serve`` with status 2 and one line (quick tier)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from engine_worker.contract.dlfp_config import DLFPConfig, attribute_docstrings
from engine_worker.controller.params import CapParams, bounds_of
from gateway.admission import AdmissionLimits
from gateway.cli import build_parser, main
from gateway.settings import Settings


def test_controller_and_admission_fields_are_derived() -> None:
    for name, field in DLFPConfig.model_fields.items():
        assert name in Settings.model_fields
        assert Settings.model_fields[name].get_default() is None  # unset = per-device default
        assert Settings.model_fields[name].description == field.description
    for name, field in AdmissionLimits.model_fields.items():
        assert Settings.model_fields[name].get_default() == field.get_default()
    help_text = build_parser().format_help()
    assert "serve" in help_text


def test_the_model_at_the_edge_is_derived_from_the_controllers_declaration() -> None:
    declared = fields(CapParams)
    docs = attribute_docstrings(CapParams)
    assert list(DLFPConfig.model_fields) == [f.name for f in declared]
    for f in declared:
        model_field = DLFPConfig.model_fields[f.name]
        assert model_field.get_default() == f.default
        assert model_field.description == docs[f.name]
    schema = DLFPConfig.model_json_schema()["properties"]
    assert schema["gain"]["minimum"] == bounds_of("gain").ge == 0.01
    assert schema["gain"]["maximum"] == bounds_of("gain").le == 1
    target = {member.get("type"): member for member in schema["target_ms"]["anyOf"]}
    assert target["number"]["maximum"] == bounds_of("target_ms").le
    assert DLFPConfig().to_params() == CapParams()
    tuned = DLFPConfig(controller="fixed", fixed_cap_tokens=64, target_ms=150)
    assert DLFPConfig.from_params(tuned.to_params()) == tuned
    with pytest.raises(ValueError, match="multiple of step_tokens"):
        CapParams(fixed_cap_tokens=60)


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--target-ms", "-5"], {}, "target_ms"),
        (["--gain", "nan"], {}, "gain"),
        (["--max-concurrent", "0"], {}, "max_concurrent"),
        ([], {"DLFP_TTFT_SLO_MS": "inf"}, "ttft_slo_ms"),
        (["--device", "cpu", "--min-cap-tokens", "2048"], {}, "min_cap_tokens"),
        (["--engine-stall-s", "0"], {}, "engine_stall_s"),
    ],
)
def test_bad_setting_exits_2_with_one_line(
    argv: list[str],
    env: dict[str, str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir("/")  # no .env
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "Traceback" not in err


def test_serve_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    """Help texts are docstrings; one with a '%' once crashed argparse's formatter."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for name in Settings.model_fields:
        if name != "engine_args":
            assert "--" + name.replace("_", "-") in out
    assert "--no-feedforward" in out


def test_engine_args_take_json_booleans_and_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "DLFP_ENGINE_ARGS", '{"async_scheduling": true, "pipeline_parallel_size": 2}'
    )
    assert Settings().engine_args == {"async_scheduling": "true", "pipeline_parallel_size": "2"}
