"""The Vercel AI SDK (``ai`` and ``@ai-sdk/openai``, pinned in tests/clients_js) against
the gateway on the FAKE engine, under a real uvicorn socket (quick tier).

The SDK runs as an application would run it, in its default configuration but for the
provider's ``baseURL`` and ``apiKey``; every check goes through the Responses API (the
provider's default) and through Chat Completions. The FAKE engine's canned words and its
canned JSON instance of a schema stand in for the model's answer.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import Settings
from tests.debian_tools import DebianPrograms
from tests.fakes import WORDS, FakeEngine
from tests.http_helpers import fake_app, served_in_thread
from tests.redis_server import running_redis

CLIENTS_JS = Path(__file__).resolve().parent / "clients_js"
SCRIPT = CLIENTS_JS / "ai_sdk_check.mjs"
APIS = ("responses", "chat")
KINDS = ("generateText", "streamText", "toolLoop", "generateObject", "conversation")
MIN_NODE_MAJOR = 20
FAKE_ANSWER = "".join(WORDS)
MODEL = "fake-model"


def _require(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        pytest.fail(
            f"{program} is not on PATH: the AI SDK tests need Node.js {MIN_NODE_MAJOR}+ "
            "and npm (https://nodejs.org)",
            pytrace=False,
        )
    return path


@functools.cache
def installed_clients_js() -> Path:
    """tests/clients_js with its locked packages installed by ``npm ci``, once per test
    process (both tiers' files share it)."""
    node = _require("node")
    npm = _require("npm")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    match = re.match(r"v(\d+)\.", version.stdout)
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        pytest.fail(f"Node.js {MIN_NODE_MAJOR}+ needed, found {version.stdout!r}", pytrace=False)
    # NOTE: ci, not install: it refuses a package.json that disagrees with the lock file,
    # so the pinned versions are the ones under test.
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=CLIENTS_JS,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        pytest.fail(f"npm ci failed in {CLIENTS_JS}:\n{result.stderr[-4000:]}", pytrace=False)
    return CLIENTS_JS


def run_checks(
    base_url: str,
    model: str,
    kinds: tuple[str, ...] = KINDS,
    timeout_s: float = 120.0,
    second_base_url: str | None = None,
) -> dict[str, dict[str, Any]]:
    """The script's result line for each check, by name (``<api>.<kind>``); with a second
    gateway, the conversation's turns alternate between the two."""
    directory = installed_clients_js()
    command = ["node", str(SCRIPT), "--base-url", base_url, "--model", model]
    command += ["--only", ",".join(kinds)]
    if second_base_url:
        command += ["--second-base-url", second_base_url]
    result = subprocess.run(
        command,
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    # 1 means a check failed, which its own line reports; anything else is the script's.
    assert result.returncode in (0, 1), result.stderr[-4000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {line["check"]: line for line in lines}


@pytest.fixture(scope="module")
def checks() -> Iterator[dict[str, dict[str, Any]]]:
    installed_clients_js()
    engine = FakeEngine(model_name=MODEL, max_model_len=4096)
    app = fake_app(Settings(_env_file=None), engine)  # type: ignore[call-arg]
    with served_in_thread(app) as where:
        yield run_checks(f"http://{where}", MODEL)


def _passed(checks: dict[str, dict[str, Any]], name: str) -> Any:
    assert name in checks, f"{name} did not report: {sorted(checks)}"
    line = checks[name]
    assert line["ok"], json.dumps(line["detail"])
    return line["detail"]


def test_every_check_reports(checks: dict[str, dict[str, Any]]) -> None:
    assert sorted(checks) == sorted(f"{api}.{kind}" for api in APIS for kind in KINDS)


@pytest.mark.parametrize("api", APIS)
def test_generate_text(checks: dict[str, dict[str, Any]], api: str) -> None:
    detail = _passed(checks, f"{api}.generateText")
    assert detail["text"].startswith(FAKE_ANSWER)
    assert detail["usage"]["outputTokens"] == 32


@pytest.mark.parametrize("api", APIS)
def test_stream_text_arrives_in_parts(checks: dict[str, dict[str, Any]], api: str) -> None:
    detail = _passed(checks, f"{api}.streamText")
    assert detail["text"].startswith(FAKE_ANSWER)
    assert detail["numParts"] > 1


@pytest.mark.parametrize("api", APIS)
def test_forced_tool_runs_and_the_loop_takes_a_second_step(
    checks: dict[str, dict[str, Any]], api: str
) -> None:
    detail = _passed(checks, f"{api}.toolLoop")
    # The FAKE engine's instance of {a: number, b: number}, constrained by the named tool.
    assert detail["calls"][0] == {"a": 1.5, "b": 1.5}
    assert detail["results"] == [3]
    assert [step["toolCalls"] for step in detail["steps"]] == [["add"], ["add"]]


@pytest.mark.parametrize("api", APIS)
def test_generate_object_parses_the_schema_instance(
    checks: dict[str, dict[str, Any]], api: str
) -> None:
    detail = _passed(checks, f"{api}.generateObject")
    assert detail["object"] == {"city": "fake", "population": 1}
    assert detail["finishReason"] == "stop"


# Through openai(model) the SDK sends the first reply back as an item_reference (read
# from the stored responses); through Chat Completions, the messages themselves.
@pytest.mark.parametrize("api", APIS)
def test_a_conversation_continues_from_the_reply_messages(
    checks: dict[str, dict[str, Any]], api: str
) -> None:
    detail = _passed(checks, f"{api}.conversation")
    assert detail["second"].startswith(FAKE_ANSWER)


def test_a_conversation_alternating_between_gateways_sharing_redis(
    debian_programs: DebianPrograms, tmp_path: Path
) -> None:
    """Through openai(model), the second and third turns refer to items the other gateway
    stored: the two find them in the Redis they share."""
    executable = debian_programs.path("redis-server")
    with running_redis(executable, tmp_path) as redis_server:
        shared = {"response_store": "redis", "redis_url": redis_server.url}
        apps = [
            fake_app(Settings(_env_file=None, **shared), FakeEngine(MODEL, 4096))  # type: ignore[call-arg]
            for _ in range(2)
        ]
        with served_in_thread(apps[0]) as one, served_in_thread(apps[1]) as two:
            checks = run_checks(
                f"http://{one}", MODEL, ("conversation",), second_base_url=f"http://{two}"
            )
    for api in APIS:
        detail = _passed(checks, f"{api}.conversation")
        assert detail["third"].startswith(FAKE_ANSWER)
