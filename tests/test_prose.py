"""The project speaks of itself, not of its own making (quick tier).

No document, comment or docstring refers to the sittings, tickets or phases it was
built in (``MAKING`` lists the phrases): a reader needs what was measured, where and
how to rerun it. Documents are read whole; code files only in their comments and
docstrings. Exempt: recorded results (``bench/results/``), pytest's own sessions
(``scope="session"``, a session-scoped fixture or gateway, the test session) and the
synthetic prompts' ``[Session ...]`` header.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAKING = re.compile(
    r"\b(this|the|a|first|second|third|fourth|later) session\b"
    r"|\bsession's"
    r"|\bissue \d+"
    r"|\bthe issue's"
    r"|\bstage [a-d]\b",
    re.IGNORECASE,
)
PYTEST_SESSION = re.compile(
    r"scope=[\"']session[\"']"
    r"|\bsession[- ](scoped|scope|fixtures?|gateway)\b"
    r"|\b(test|pytest)[- ]session\b"
    r"|\[Session\b[^\]]*\]",
    re.IGNORECASE,
)
SKIPPED_DIRS = {".venv", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules"}
SKIPPED = (ROOT / "bench" / "results", ROOT / "tests" / "artifacts")
CODE_SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".toml"}
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("**/*.md")),
    ROOT / "deploy" / "README.md",
    ROOT / "bench" / "README.md",
]


def _python_prose(source: str) -> list[tuple[int, str]]:
    """Comments and docstrings (any bare string statement: attribute docstrings too)."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for offset, line in enumerate(node.value.value.splitlines()):
                found.append((node.lineno + offset, line))
    return found


def _hash_comments(source: str) -> list[tuple[int, str]]:
    """What follows a ``#`` that starts a line or a word (shell, YAML, TOML, make)."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        match = re.search(r"(?:^|\s)#(.*)$", line)
        if match:
            found.append((number, match.group(1)))
    return found


def code_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIPPED_DIRS or any(path.is_relative_to(s) for s in SKIPPED):
            continue
        if path.name.endswith(".egg-info") or any(p.endswith(".egg-info") for p in parts):
            continue
        if path.is_file() and (path.suffix in CODE_SUFFIXES or path.name == "Makefile"):
            files.append(path)
    return sorted(files)


def hits(path: Path) -> list[str]:
    text = path.read_text(errors="replace")
    if path in DOCUMENTS:
        pieces = list(enumerate(text.splitlines(), 1))
    elif path.suffix == ".py":
        pieces = _python_prose(text)
    else:
        pieces = _hash_comments(text)
    found = []
    for line, piece in pieces:
        for match in MAKING.finditer(PYTEST_SESSION.sub("", piece)):
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    return found


def test_the_checks_catch_the_phrases_and_spare_pytest() -> None:
    samples = json.loads((ROOT / "tests" / "prose_samples.json").read_text())
    assert len(MAKING.findall(samples["caught"])) == samples["num_caught"] == 5
    assert MAKING.findall(PYTEST_SESSION.sub("", samples["spared"])) == []
    found = _python_prose(samples["source"])
    assert found == [tuple(hit) for hit in samples["prose_found"]]


def test_no_prose_speaks_of_the_projects_making() -> None:
    files = [p for p in DOCUMENTS if p.exists()] + code_files()
    found = [hit for path in files for hit in hits(path)]
    assert found == []
