"""Every committed results folder re-analyses to the summary.json committed beside it
(quick tier, no server): an episodes folder through ``bench episodes --check``, a sweep
folder (one with rate-<r>/ folders) through ``bench sweep --markdown --check``, any other
through ``bench summary --check``.

The records are the source and the summaries derived from them: a change to the
statistics, the records' reader or a folder that moves shows up here, and is fixed by
rerunning the same command without ``--check``.

A superseded folder whose raw records were dropped (to keep ``bench/results`` small) has
a ``DROPPED.md`` naming what went and the commit that holds it; it keeps its summaries and
its command, and is not re-analysed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.cli import main as gateway_main

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DROPPED = sorted(p.parent.relative_to(ROOT) for p in RESULTS.glob("*/DROPPED.md"))
FOLDERS = sorted(
    p.parent.relative_to(ROOT)
    for p in RESULTS.rglob("summary.json")
    if not any(p.is_relative_to(ROOT / d) for d in DROPPED)
)


def _is_episodes(folder: Path) -> bool:
    return (ROOT / folder / "episodes.json").exists()


def _is_tiers(folder: Path) -> bool:
    return (ROOT / folder / "tiers.json").exists()


def _is_sweep(folder: Path) -> bool:
    return any(p.is_dir() for p in (ROOT / folder).glob("rate-*"))


def test_every_results_folder_is_checked() -> None:
    assert len(FOLDERS) >= 8, FOLDERS
    assert any(_is_sweep(f) for f in FOLDERS) and not all(_is_sweep(f) for f in FOLDERS)


@pytest.mark.parametrize("folder", DROPPED, ids=[f.name for f in DROPPED])
def test_a_folder_without_its_records_says_where_they_are(folder: Path) -> None:
    note = (ROOT / folder / "DROPPED.md").read_text()
    assert re.search(r"\bgit checkout [0-9a-f]{7,40} -- ", note), note
    assert list((ROOT / folder).rglob("summary.json")) or list((ROOT / folder).rglob("*.md"))
    assert list((ROOT / folder).glob("run.sh")) or "command" in note.lower()


@pytest.mark.parametrize(
    "folder", FOLDERS, ids=[str(f.relative_to("bench/results")) for f in FOLDERS]
)
def test_reanalysis_gives_the_committed_summary(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # summary.json names its folder as it was given, relative to the repository root.
    monkeypatch.chdir(ROOT)
    if _is_episodes(folder):
        argv = ["bench", "episodes", "--check", "--results", str(folder)]
    elif _is_tiers(folder):
        argv = ["bench", "tiers", "--check", "--results", str(folder)]
    elif _is_sweep(folder):
        argv = ["bench", "sweep", "--markdown", "--check", "--results", str(folder)]
    else:
        argv = ["bench", "summary", "--check", "--results", str(folder)]
    status = gateway_main(argv)
    out, err = capsys.readouterr()
    assert status == 0, f"{' '.join(argv)} differs from the committed summary.json:\n{err}"
    assert "matches the records" in out
    if _is_sweep(folder):
        assert "\n| arm | capacity req/s |" in "\n" + out  # the Markdown table


def test_a_changed_record_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check can fail: one trial dropped from a copy of a committed folder."""
    source = ROOT / next(f for f in FOLDERS if not _is_sweep(f) and not _is_tiers(f))
    copy = tmp_path / "copy"
    for path in source.rglob("*"):
        if path.is_file() and path.suffix in {".gz", ".jsonl", ".json"}:
            target = copy / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    summary = (copy / "summary.json").read_text().replace(str(source.relative_to(ROOT)), "copy")
    (copy / "summary.json").write_text(summary)
    monkeypatch.chdir(tmp_path)
    assert gateway_main(["bench", "summary", "--check", "--results", "copy"]) == 0
    next((copy).glob("*/seed-*.jsonl*")).unlink()
    capsys.readouterr()
    assert gateway_main(["bench", "summary", "--check", "--results", "copy"]) == 1
    assert "differs:" in capsys.readouterr().err
