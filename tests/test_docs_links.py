"""Every relative link and anchor in the documents resolves (quick tier).

A link's file must exist, relative to the document; an anchor must name a heading of
the file it points to, by GitHub's slugs (lower case, punctuation dropped, spaces as
hyphens, a repeated heading suffixed ``-1``, ``-2``). Code blocks and code spans are
not links.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        ROOT / "deploy" / "README.md",
        ROOT / "bench" / "README.md",
    ]
)
_FENCE = re.compile(r"^ *(```|~~~).*?^ *\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text with code blocks and code spans removed."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[^\w\- ]", "", text.lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def links(path: Path) -> list[str]:
    return [
        target
        for target in _LINK.findall(prose(path.read_text()))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def test_the_slugs_are_githubs() -> None:
    assert slug("Runtime tuning: `/admin/dlfp`") == "runtime-tuning-admindlfp"
    assert slug("DLFP in vLLM's scheduler") == "dlfp-in-vllms-scheduler"
    assert slug("A second CPU: AMD EPYC family 23, model 49") == (
        "a-second-cpu-amd-epyc-family-23-model-49"
    )
    assert slug("The `feedforward` cap (default on; `dlfp-ct` only)") == (
        "the-feedforward-cap-default-on-dlfp-ct-only"
    )


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in links(document):
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert broken == []
