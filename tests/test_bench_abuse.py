"""``bench abuse`` against the gateway on the FAKE engine behind a real uvicorn socket
(quick tier): the verdicts per scenario, the exit status, the loopback-only rule, and
the burst's rules on hand-made records."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from bench.abuse.base import SCENARIO_NAMES, check_loopback
from bench.abuse.burst import StreamRecord, judge_burst
from bench.abuse.scenarios import SCENARIOS
from bench.cli import main
from gateway.server import uvicorn_config
from gateway.settings import Settings
from tests.conftest import free_port
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app


class SlowPromptFakeEngine(FakeEngine):
    """Tokenizes a long prompt slowly, as a real tokenizer takes time on 200 KB."""

    def tokenize(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        if len(text) > 10_000:
            time.sleep(0.3)
        return super().tokenize(text, *args, **kwargs)


@contextmanager
def served(engine: FakeEngine, **settings: Any) -> Iterator[str]:
    """The app under uvicorn in a thread of its own, so the CLI can run its own loop."""
    port = free_port()
    config = Settings(_env_file=None, host="127.0.0.1", port=port, **settings)  # type: ignore[call-arg]
    app = fake_app(config, engine)
    server = uvicorn.Server(uvicorn_config(app, config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            if httpx.get(base_url + "/ready", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the fake gateway did not get ready"
        time.sleep(0.05)
    try:
        yield base_url
    finally:
        server.should_exit = True
        thread.join(10)


FIRST_SIX = SCENARIO_NAMES[:6]
HOSTILE = SCENARIO_NAMES[6:]


def _verdicts(table: str) -> dict[str, str]:
    rows = [line.split() for line in table.splitlines()]
    return {row[0]: row[1] for row in rows if len(row) > 1 and row[0] in SCENARIO_NAMES}


def test_every_scenario_passes_against_a_gateway_that_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "abuse.json"
    engine = SlowPromptFakeEngine(max_model_len=300_000)
    with served(engine, stream_write_timeout_s=1.0, max_concurrent=4, max_queue=4) as url:
        code = main(
            [
                "abuse",
                f"--base-url={url}",
                f"--scenarios={','.join(FIRST_SIX)}",
                "--num-burst=40",
                "--num-surrogate=10",
                "--num-pre-admission=16",
                "--stream-write-timeout-s=1",
                f"--results={results}",
            ]
        )
    out, err = capsys.readouterr()
    # NOTE: timings belong in benchmarks: the one criterion that depends on this machine's
    # speed (a refusal within 1 s) may fail on a slow or busy machine; every other must pass.
    failed = [line.split("FAILED: ", 1)[1] for line in out.splitlines() if "FAILED: " in line]
    assert all(f.startswith("P95 time to a refusal") for f in failed), out
    expected = dict.fromkeys(FIRST_SIX, "PASS") | ({"burst": "FAIL"} if failed else {})
    assert _verdicts(out) == expected, out
    assert (code == 0) == (not failed)
    assert all(f"abuse: {name}: start" in err for name in FIRST_SIX)
    written = json.loads(results.read_text())
    assert written["passed"] == (not failed)
    by_name = {s["scenario"]: s for s in written["scenarios"]}
    assert len(by_name["burst"]["records"]) == 40
    # NOTE: whether some of the 40 are refused depends on how fast the fake engine frees
    # its 4 slots (a clean-clone run saw all 40 served); the PASS above already holds
    # every request to a full stream or a 429 with Retry-After.
    assert set(by_name["burst"]["figures"]["by_status"]) <= {"200", "429"}
    codes = by_name["pre-admission"]["figures"]["by_code"]
    assert codes.get("queue_full", 0) + codes.get("client_share", 0) > 0
    # Freed within the write time-out plus 10 s: the scenario's own PASS above says so.
    assert by_name["stalled-readers"]["figures"]["seconds_to_free"] is not None


def test_the_scenarios_of_one_client_against_the_others_run_and_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scaled down. Their time criteria (loop lag, /health, the other client's wait) are
    for a measurement with nothing else running; here only the others must pass."""
    results = tmp_path / "abuse.json"
    with served(FakeEngine(max_model_len=300_000), header_timeout_s=0.5) as url:
        main(
            [
                "abuse",
                f"--base-url={url}",
                f"--scenarios={','.join(HOSTILE)}",
                "--num-list-bodies=2",
                "--num-idle-sockets=20",
                "--num-space-free=4",
                "--num-schemas=4",
                # NOTE: 200 streams at once against a 0.5 s header time-out on 2 cores left
                # connections unread past it in some full-suite runs (ReadError); the
                # scenario's judgement is the same at 40.
                "--num-cold-burst=40",
                f"--results={results}",
            ]
        )
    out = capsys.readouterr().out
    failed = [line.split("FAILED: ", 1)[1] for line in out.splitlines() if "FAILED: " in line]
    timed = ("event-loop lag", "/health within", "within 1 s", "served within")
    assert all(f.startswith(timed) or " within " in f for f in failed), out
    by_name = {s["scenario"]: s for s in json.loads(results.read_text())["scenarios"]}
    assert set(by_name) == set(HOSTILE)
    assert by_name["list-bodies"]["figures"]["by_status"] == {"400": 2}
    assert by_name["list-bodies"]["figures"]["loop_lag_p99_ms_at_most"] is not None
    assert by_name["idle-sockets"]["figures"]["closed"] == 20
    for name in ("space-free-prompts", "distinct-schemas"):
        assert by_name[name]["figures"]["other_client"]["status"] == "200", out


def test_a_gateway_that_takes_a_deep_schema_fails_that_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with served(FakeEngine(), max_schema_depth=1000, max_schema_bytes=1_000_000) as url:
        code = main(["abuse", f"--base-url={url}", "--scenarios=deep-schema,reply-too-big"])
    out = capsys.readouterr().out
    assert _verdicts(out) == {"deep-schema": "FAIL", "reply-too-big": "PASS"}, out
    assert "FAILED: 400 naming response_format.json_schema.schema (got 200" in out
    assert code == 1


def test_only_a_loopback_gateway_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["abuse", "--base-url=http://192.0.2.1:8000"]) == 2
    assert "only a loopback gateway" in capsys.readouterr().err
    for url in ("http://127.0.0.1:8000", "http://localhost:8000/v1", "http://[::1]:8000"):
        check_loopback(url)
    for url in ("http://127.0.0.2:8000", "https://example.com", "http://[::2]:80", "10.0.0.1"):
        with pytest.raises(ValueError, match="loopback"):
            check_loopback(url)
    with pytest.raises(ValueError, match="http://"):
        check_loopback("https://127.0.0.1:8000")


def test_the_scenarios_are_the_ones_the_command_names() -> None:
    assert tuple(SCENARIOS) == SCENARIO_NAMES


def _stream(ttft_s: float) -> StreamRecord:
    return StreamRecord(200, status_s=0.01, ttft_s=ttft_s, is_complete=True)


def _refusal(status_s: float, retry_after: str | None = "1") -> StreamRecord:
    return StreamRecord(429, status_s=status_s, retry_after=retry_after, code="queue_full")


def test_the_burst_rules_on_hand_made_records() -> None:
    good = [_stream(0.5), _stream(0.8), *(_refusal(0.05) for _ in range(20))]
    outcome = judge_burst(good, ttft_slo_ms=1000)
    assert outcome.passed, outcome.failures
    assert outcome.figures["num_within_slo"] == 2
    assert outcome.figures["by_code"] == {"queue_full": 20}

    # A refusal without Retry-After, a stream cut short, slow refusals, a late first token.
    cut = StreamRecord(200, status_s=0.01, ttft_s=0.2, code="engine_error")
    bad = [_stream(0.5), _stream(3.0), cut, _refusal(0.05, retry_after=None)]
    bad += [_refusal(2.0) for _ in range(10)]
    outcome = judge_burst(bad, ttft_slo_ms=1000)
    assert not outcome.passed
    assert len(outcome.failures) == 3, outcome.failures
    assert outcome.failures[0].endswith("(2 not)")
    assert outcome.failures[1].startswith("P95 time to a refusal 2.00 s")
    assert outcome.failures[2].startswith("admitted P99 TTFT")
    assert outcome.figures["num_within_slo"] == 1
