"""Declarative studies (quick tier): every bench/studies/*.toml is well formed, a bad one
is refused with what is wrong, and the plan bench/run_study.sh follows starts a server
only when a part needs another one."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from bench.capacity.study import load_study
from bench.capacity.study_plan import main as plan_main
from bench.capacity.study_plan import plan

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted((ROOT / "bench" / "studies").glob("*.toml"))
VALUES = {"out": "OUT", "base_url": "http://127.0.0.1:1", "tokenizer": "TOK", "admin_token": "T"}


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_every_study_loads_and_says_what_it_asks(path: Path) -> None:
    study = load_study(path)
    assert study.about.endswith("?"), "a study's about is the question it answers"
    assert study.results == Path("bench/results") / path.stem
    assert plan(study, Path("OUT"), VALUES)[0] == ["record-cpu", "OUT"]


def test_the_headline_study_is_the_capacity_sweep() -> None:
    study = load_study(ROOT / "bench" / "studies" / "capacity.toml")
    headline = study.part("headline")
    assert {"off", "dlfp-ct"} <= set(headline.arms) and study.is_sweep(headline)
    static = {a for p in study.parts for a in p.arms if a.startswith("fixed-")}
    assert static == {"fixed-32", "fixed-64", "fixed-128", "fixed-256"}
    assert "bench/studies/capacity.toml" in (ROOT / "Makefile").read_text()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


ARMS = '[arms]\noff = { controller = "off" }\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (ARMS, "no [[parts]]"),
        (ARMS + '[[parts]]\nname = "p"\narms = ["dlfp"]\n', "arms not in the study's [arms]: dlfp"),
        (ARMS + '[[parts]]\nname = "p"\narms = ["off"]\nseed = [1]\n', "unknown option 'seed'"),
        (ARMS + '[[parts]]\nname = "p"\narms = ["off"]\nrate = "fast"\n', "rate is a float"),
        (ARMS + '[[parts]]\nname = "p"\n', "a part has either arms or run"),
        (ARMS + '[[parts]]\nname = "p"\narms = ["off"]\nserver = "sglang"\n', "server is one of"),
        ('aboot = "?"\n' + ARMS, "unknown keys aboot"),
        ("[arms\n", "study.toml"),
    ],
)
def test_a_bad_study_is_refused_with_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_study(_write(tmp_path, text))


STUDY = (
    ARMS
    + """dlfp-ct = { controller = "dlfp-ct" }
thr-64 = { controller = "off" }
[options]
rates = [0.1, 0.2]
[[parts]]
name = "cost"
run = ["bench", "chunks", "--results", "{out}/chunks", "--base-url", "{base_url}"]
unless_exists = "{out}/chunks/chunks.json"
[[parts]]
name = "headline"
arms = ["off", "dlfp-ct"]
[[parts]]
name = "thr-64"
serve = ["--engine-arg", "long_prefill_token_threshold=64"]
arms = ["thr-64"]
[[parts]]
name = "again"
arms = ["off"]
"""
)


def test_the_plan_starts_a_server_only_when_a_part_needs_another(tmp_path: Path) -> None:
    study = load_study(_write(tmp_path, STUDY))
    out = tmp_path / "out"
    values = VALUES | {"out": str(out)}
    steps = plan(study, out, values, extra=["--seeds", "9"])
    verbs = [s[0] if s[0] != "gateway" else f"{s[0]} {s[2]}" for s in steps]
    assert verbs == [
        "record-cpu",
        "serve",
        "save-admin",
        "gateway chunks",
        "gateway sweep",
        "stop",
        "serve",
        "save-admin",
        "gateway sweep",
        "stop",
        "serve",
        "save-admin",
        "gateway sweep",
        "stop",
        "gateway sweep",  # the re-analysis of every rate
    ]
    assert steps[1] == ["serve", "gateway"] and steps[6][:2] == ["serve", "thr-64"]
    assert steps[3][-4:] == ["--results", f"{out}/chunks", "--base-url", "http://127.0.0.1:1"]
    assert steps[4][-2:] == ["--seeds", "9"] and "--part" in steps[4]
    # A command whose result exists is not run again; the parts asked for run in that order.
    (out / "chunks").mkdir(parents=True)
    (out / "chunks" / "chunks.json").write_text("{}")
    steps = plan(study, out, values, parts=["again", "cost"])
    assert [s[0] for s in steps] == [
        "record-cpu",
        "serve",
        "save-admin",
        "gateway",
        "stop",
        "gateway",
    ]


def test_a_study_of_one_rate_ends_with_its_comparisons_and_summary(tmp_path: Path) -> None:
    text = 'compare = ["dlfp-ct"]\ncalibration_from = "cal.json"\n' + ARMS + "dlfp-ct = {}\n"
    text += '[[parts]]\nname = "p"\narms = ["off", "dlfp-ct"]\n'
    study = load_study(_write(tmp_path, text))
    steps = plan(study, Path("OUT"), VALUES)
    assert steps[1] == ["copy-missing", "cal.json", "OUT/calibration.json"]
    compare = ["try", "gateway", "bench", "compare", "--results", "OUT", "--baseline", "off"]
    assert steps[-2][:8] == compare
    assert steps[-1] == ["gateway", "bench", "summary", "--results", "OUT", "--plots"]
    assert plan(study, Path("OUT"), VALUES, calibration="none")[1][0] == "serve"


def test_the_plan_command_prints_shell_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, STUDY)
    args = ["--out", "my results", "--port", "1", "--tokenizer", "TOK", "--admin-token", "T"]
    assert plan_main(["plan", str(path), *args, "--parts", "headline", "--", "--seeds", "9"]) == 0
    lines = capsys.readouterr().out.splitlines()
    words = shlex.split(lines[3])
    assert words[:4] == ["gateway", "bench", "sweep", "--study"]
    assert words[words.index("--results") + 1] == "my results" and words[-2:] == ["--seeds", "9"]
    assert plan_main(["plan", str(path), *args, "--parts", "nope"]) == 2
    assert "--part one of cost, headline, thr-64, again" in capsys.readouterr().err
    assert plan_main(["results", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "bench/results/study"


def test_part_needs_study() -> None:
    from bench.capacity.study import apply_study

    args = argparse.Namespace(study=None, part="headline")
    with pytest.raises(ValueError, match="--part needs --study"):
        apply_study(args, sweep=True)
