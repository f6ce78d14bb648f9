"""bench/studies/big_prompts.py on a short configuration: a gateway on the FAKE engine served by
uvicorn in a thread (httpx's in-process transport does not stream), quick tier."""

from __future__ import annotations

import threading
import time

import httpx
import uvicorn

from bench.studies.big_prompts import Options, print_table, run
from gateway.settings import Settings
from tests.conftest import free_port
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app


async def test_big_prompts_bench_runs_on_a_short_configuration() -> None:
    engine = FakeEngine(delay_s=0.01)
    engine.info.max_token_bytes = 4
    app = fake_app(Settings(_env_file=None, max_body_bytes=4096), engine)  # type: ignore[call-arg]
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        # NOTE: the baseline reuses the window the big prompts set, counted from the
        # phase's start: streams of 2 s (200 tokens at 10 ms) still cover it when a busy
        # machine delays the big phase's first tokens (at 60 tokens a loaded CI run saw
        # the baseline's streams end before the window began: no gaps to compare).
        opts = Options(streams=2, max_tokens=200, big=3, body_bytes=4096)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            result = await run(client, opts)
    finally:
        server.should_exit = True
        thread.join(10)
    summary = result["summary"]
    assert summary["baseline"]["gaps"] > 0 and summary["big"]["gaps"] > 0
    assert summary["p99_ratio"] is not None
    # Too long for the fake's 256-token context: refused by size, before tokenizing.
    assert result["big_replies"]["codes"] == ["context_length_exceeded"] * 3
    assert engine.num_tokenized == 2 * 2 + 1  # the streams and the warm-up only
    print_table(result)
