"""The README's examples, run as written against a gateway on the FAKE engine (quick tier).

The gateway is served by uvicorn on a free loopback port in a thread (httpx's
in-process transport does not serve curl); each example gets that port in place of
8000. The FAKE engine serves under the embedded model's name, so the examples need no
other change, and its canned words stand in for the model's answer.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.settings import Settings
from tests.fakes import WORDS, FakeEngine
from tests.http_helpers import fake_app, served_in_thread

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PORT_IN_EXAMPLES = re.compile(r"\b(127\.0\.0\.1|localhost):8000\b")
FAKE_ANSWER = "".join(WORDS[:3])


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of one language, fences and indentation removed."""
    fence = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
    blocks = []
    for match in fence.finditer(text):
        if match.group(2) == language:
            indent = len(match.group(1))
            blocks.append("\n".join(line[indent:] for line in match.group(3).splitlines()))
    return blocks


def curl_commands(text: str) -> list[str]:
    """Every shell block of the README that runs curl."""
    return [b for b in code_blocks(text, "sh") if b.lstrip().startswith("curl")]


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    engine = FakeEngine(model_name="smollm2-135m-instruct")
    app = fake_app(Settings(_env_file=None), engine)  # type: ignore[call-arg]
    with served_in_thread(app) as where:
        yield where


def test_the_openai_client_example_streams(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    [block] = [b for b in code_blocks(README, "python") if "OpenAI(" in b]
    assert PORT_IN_EXAMPLES.search(block)
    code = compile(PORT_IN_EXAMPLES.sub(address, block), "README.md", "exec")
    exec(code, {"__name__": "readme_example"})
    printed = capsys.readouterr().out
    assert printed.startswith(FAKE_ANSWER) and printed.endswith("\n")


def _run(command: str, address: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # A .curlrc of our own makes an HTTP error a failed command, as curl -f would.
    (tmp_path / ".curlrc").write_text("fail-with-body\nshow-error\n")
    return subprocess.run(
        ["bash", "-c", PORT_IN_EXAMPLES.sub(address, command)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "CURL_HOME": str(tmp_path)},
    )


def test_the_curl_example_streams(address: str, tmp_path: Path) -> None:
    [command] = [c for c in curl_commands(README) if "/v1/chat/completions" in c]
    result = _run(command, address, tmp_path)
    assert result.returncode == 0, result.stderr
    data = [
        line[len("data: ") :] for line in result.stdout.splitlines() if line.startswith("data:")
    ]
    assert data[-1] == "[DONE]"
    deltas = [json.loads(d)["choices"][0]["delta"] for d in data[:-1]]
    assert "".join(d.get("content") or "" for d in deltas).startswith(FAKE_ANSWER)


def test_the_admin_example_changes_the_target(address: str, tmp_path: Path) -> None:
    [command] = [c for c in curl_commands(README) if "/admin/dlfp" in c]
    result = _run(command, address, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["settings"]["target_ms"] == 250
