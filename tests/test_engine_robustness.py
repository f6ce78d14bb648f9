"""Overload, disconnects and fuzzing on the real engine; nothing may be lost."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import TINY_MODEL_NAME, Server
from tests.engine_helpers import admin, chat_body, long_prompt, metric_sum, metrics, stream_chat
from tests.fuzz import fuzz_for_500

pytestmark = pytest.mark.engine


@pytest.fixture
def tight_admission(gateway_server: Server) -> Iterator[None]:
    before = admin(gateway_server, "GET", "/admin/admission").json()["settings"]
    r = admin(
        gateway_server,
        "PATCH",
        "/admin/admission",
        json={"max_concurrent": 2, "max_queue": 3, "max_queue_wait_s": 8},
    )
    assert r.status_code == 200
    yield
    assert admin(gateway_server, "PATCH", "/admin/admission", json=before).status_code == 200


def wait_idle(server: Server, timeout_s: float = 60) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        m = metrics(server)
        idle = (
            m["dlfp_active_requests"] == 0
            and m["dlfp_queued_requests"] == 0
            and metric_sum(m, "vllm:num_requests_running") == 0
            and metric_sum(m, "vllm:num_requests_waiting") == 0
        )
        if idle or time.monotonic() > deadline:
            return m
        time.sleep(0.5)


def rss_mb(server: Server) -> float:
    return float(psutil.Process(server.process.pid).memory_info().rss) / 2**20


async def _one(client: httpx.AsyncClient, body: dict[str, Any], delay_s: float) -> dict[str, Any]:
    await asyncio.sleep(delay_s)
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        text = (await r.aread()).decode()
        return {"status": r.status_code, "retry_after": r.headers.get("retry-after"), "text": text}


def test_poisson_burst_over_capacity(gateway_server: Server, tight_admission: None) -> None:
    rng = random.Random(11)
    arrivals, t = [], 0.0
    for _ in range(24):
        t += rng.expovariate(20.0)  # 20 req/s offered; 2 streams of ~1 s each serve ~2 req/s
        arrivals.append(t)
    bodies = [
        chat_body(
            long_prompt(500 + i, 800), 256, stream=True, stream_options={"include_usage": True}
        )
        for i in range(len(arrivals))
    ]
    rss_before = rss_mb(gateway_server)

    async def burst() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=gateway_server.base_url, timeout=300) as client:
            return await asyncio.gather(
                *[_one(client, b, d) for b, d in zip(bodies, arrivals, strict=True)]
            )

    results = asyncio.run(burst())
    completed = 0
    for r in results:
        if r["status"] == 200:
            assert r["text"].rstrip().endswith("data: [DONE]"), r["text"][-300:]
            assert '"completion_tokens":256' in r["text"]
            completed += 1
        else:
            assert r["status"] in (429, 503) and r["retry_after"] is not None, r
    assert completed >= 2 and completed < len(results)
    m = wait_idle(gateway_server)
    assert m["dlfp_active_requests"] == 0 and m["dlfp_queued_requests"] == 0
    assert metric_sum(m, "vllm:num_requests_running") == 0
    # Still serving, and memory back near where it was.
    ok = httpx.post(
        gateway_server.base_url + "/v1/chat/completions",
        json=chat_body("Still there?", 4),
        timeout=120,
    )
    assert ok.status_code == 200
    assert rss_mb(gateway_server) < rss_before + 200


def test_disconnects_at_random_points_leave_nothing_running(
    gateway_server: Server, tight_admission: None
) -> None:
    rng = random.Random(5)

    async def leave_after(client: httpx.AsyncClient, i: int) -> None:
        body = chat_body(long_prompt(900 + i, 600), 400, stream=True)
        stop_after = rng.choice(
            [0, 1, 3, 10]
        )  # 0 = leave before the first event (often while queued)
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                seen = 0
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        seen += 1
                    if seen >= stop_after:
                        return
        except httpx.HTTPError:
            pass

    async def run() -> None:
        async with httpx.AsyncClient(base_url=gateway_server.base_url, timeout=30) as client:
            tasks = [asyncio.create_task(leave_after(client, i)) for i in range(10)]
            await asyncio.sleep(0.2)
            for task in tasks[::3]:
                task.cancel()  # abrupt: cancelled mid-request
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())
    m = wait_idle(gateway_server)
    assert m["dlfp_active_requests"] == 0 and m["dlfp_queued_requests"] == 0
    assert metric_sum(m, "vllm:num_requests_running") == 0
    view = admin(gateway_server, "GET", "/admin/admission").json()
    assert view["state"]["num_active"] == 0 and view["state"]["num_queued"] == 0


def test_schemathesis_smoke_finds_no_500(gateway_server: Server) -> None:
    """A smoke run of the fuzzer on the real engine: no 500, and replies match the schema.

    The breadth (100 examples per operation) runs on the fake engine in ``test_fuzz.py``,
    where a 500 can only be the gateway's; this checks that the real engine's errors
    (tokenizer, template, length) map the same way.
    """
    assert fuzz_for_500(gateway_server.base_url, [TINY_MODEL_NAME], max_examples=3) == []


def test_disconnect_aborts_a_non_streamed_request(gateway_server: Server) -> None:
    """The client of a long non-streamed request leaves: the engine stops it at once."""
    # n > 1 samples: vLLM refuses it under greedy decoding (a 400 that never runs).
    body = chat_body("Tell me everything about the station.", 4000, n=8, temperature=1.0)

    async def leave_early() -> bool:
        """Whether the request was seen running before the client left."""
        async with httpx.AsyncClient(base_url=gateway_server.base_url, timeout=300) as client:
            call = asyncio.create_task(client.post("/v1/chat/completions", json=body))
            deadline = time.monotonic() + 60
            running = False
            while not running and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                running = metric_sum(metrics(gateway_server), "vllm:num_requests_running") > 0
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            return running

    assert asyncio.run(leave_early()), "the request never ran: nothing to abort"
    # 8 x 4,000 tokens take about a minute here: only an abort idles the engine in 10 s.
    m = wait_idle(gateway_server, timeout_s=10)
    assert metric_sum(m, "vllm:num_requests_running") == 0
    assert m["dlfp_active_requests"] == 0


def test_same_request_id_twice_both_complete(gateway_server: Server) -> None:
    headers = {"X-Request-Id": "same-id-twice"}
    body = chat_body("Tell me about the rain.", 64)

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=gateway_server.base_url, timeout=300) as client:
            return await asyncio.gather(
                client.post("/v1/chat/completions", json=body, headers=headers),
                client.post("/v1/chat/completions", json=body, headers=headers),
            )

    replies = asyncio.run(both())
    assert [r.status_code for r in replies] == [200, 200], [r.text for r in replies]
    assert [r.json()["usage"]["completion_tokens"] for r in replies] == [64, 64]
    assert [r.headers["x-request-id"] for r in replies] == ["same-id-twice"] * 2
    assert replies[0].json()["id"] != replies[1].json()["id"]


def test_bad_text_is_400_on_the_real_tokenizer(gateway_server: Server) -> None:
    raw = json.dumps({"model": TINY_MODEL_NAME, "prompt": "a\ud800b", "max_tokens": 2})
    r = httpx.post(
        gateway_server.base_url + "/v1/completions",
        content=raw.encode(),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"


def test_template_and_tokenizer_errors_are_invalid_requests(tiny_model_dir: Path) -> None:
    """VLLMEngine maps the template's TemplateError and the tokenizer's TypeError to
    InvalidRequestError (400), on the real tokenizer (no engine needed)."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from engine_worker.client.engine import EngineSpec, VLLMEngine
    from engine_worker.contract.api import InvalidRequestError
    from engine_worker.contract.dlfp_config import DLFPConfig

    spec = EngineSpec(str(tiny_model_dir), "tiny", "cpu", 256, 256, 4, "float32", DLFPConfig())
    engine = VLLMEngine(spec)
    engine._llm = SimpleNamespace(errored=False)
    engine._tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine._tokenizer.chat_template = "{{ raise_exception('no user message') }}"
    with pytest.raises(InvalidRequestError) as template:
        engine.render_chat([{"role": "system", "content": "hi"}])
    assert template.value.param == "messages"
    with pytest.raises(InvalidRequestError) as surrogate:
        engine.tokenize("a\ud800b")
    assert surrogate.value.param == "prompt"


def test_a_seeded_request_prefilled_in_chunks_keeps_the_engine_and_its_stream(
    gateway_server: Server,
) -> None:
    """A seeded long prompt prefilled in 16-token chunks beside a decoding stream: vLLM
    winds the seeded generator back after each discarded sample, which a CPU generator
    cannot do (``engine_worker/worker/seeded_sampling.py``). The engine lives, and the sampled
    text is the one the same request gets when its prompt is prefilled at once."""
    before = admin(gateway_server, "GET").json()["settings"]
    prompt = long_prompt(4242, 1500)
    seeded = {"temperature": 1.0, "seed": 11}
    try:
        assert admin(gateway_server, "PATCH", json={"controller": "off"}).status_code == 200
        at_once = stream_chat(gateway_server, prompt, 12, **seeded)
        assert at_once["status"] == 200, at_once
        patch = {"controller": "fixed", "fixed_cap_tokens": 16}
        assert admin(gateway_server, "PATCH", json=patch).status_code == 200
        mixed_before = admin(gateway_server, "GET").json()["state"]["num_mixed_steps"]
        decoding = threading.Event()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            stream = pool.submit(stream_chat, gateway_server, "Tell me more.", 300, decoding.set)
            assert decoding.wait(120)
            chunked = stream_chat(gateway_server, prompt, 12, **seeded)
            assert stream.result(300)["status"] == 200
        mixed_after = admin(gateway_server, "GET").json()["state"]["num_mixed_steps"]
    finally:
        assert admin(gateway_server, "PUT", json=before).status_code == 200
    assert chunked["status"] == 200 and chunked["done"], chunked
    assert mixed_after > mixed_before  # the prompt really was prefilled beside the decodes
    assert chunked["text"] == at_once["text"]
    with gateway_server.client() as client:
        assert client.get("/ready").status_code == 200
