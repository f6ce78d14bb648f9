"""The embedded SmolLM2 pinned to float32: what it knows, and that the controller never
changes which tokens it computes.

NOTE: every test here asserts the model's exact numerics, so the engine runs in float32
on every CPU, whatever ``DLFP_DTYPE`` the environment sets. ``dtype auto`` follows the CPU
(bfloat16 with AMX, float32 on AVX2-only CPUs), and in bfloat16 both claims fail for
numerics alone: the dequantized 135M model's greedy first token tips from "The" to
"L'" (no "Paris"), and vLLM's CPU kernels round differently for different prefill chunk
sizes, so near-ties flip between chunkings. ``tests/test_embedded_model.py`` runs the
same model in the configured dtype and asserts only what holds in any dtype.

The identity check: the same greedy mixed load (short streams decoding, then long
prompts prefilled beside them) under ``off``, the default ``dlfp-ct`` (SRPF order,
feed-forward cap) and a small ``fixed`` cap must give the same text, token for token.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conftest import ADMIN_TOKEN, Server, start_server, stop_server
from tests.engine_helpers import admin, long_prompt, stream_chat

pytestmark = pytest.mark.engine

MODEL = "smollm2-135m-instruct"
SHORT = [f"Question {i}: name three things a careful traveller packs." for i in range(4)]


@pytest.fixture(scope="module")
def smollm_f32_server() -> Iterator[Server]:
    server = start_server(
        "smollm2-float32-gateway",
        {
            "DLFP_DEVICE": "cpu",
            "DLFP_DTYPE": "float32",
            "DLFP_KV_CACHE_GIB": "1",
            "DLFP_ADMIN_TOKEN": ADMIN_TOKEN,
            "DLFP_ENGINE_ARGS": '{"enable_prefix_caching": "false"}',
        },
    )
    yield server
    assert stop_server(server) == 0, server.log()[-3000:]


def capital_of_france(server: Server, **sampling: float) -> str:
    client = openai.OpenAI(api_key="unused", base_url=server.base_url + "/v1", timeout=300)
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=30,
        **sampling,  # type: ignore[arg-type]
    )
    return reply.choices[0].message.content or ""


def test_capital_of_france(smollm_f32_server: Server) -> None:
    assert "Paris" in capital_of_france(smollm_f32_server, temperature=0)


def test_capital_of_france_with_the_models_default_sampling(smollm_f32_server: Server) -> None:
    """No temperature or top_p sent: the model card's 0.2 and 0.9 still say Paris often.

    NOTE: with these settings the model's first token is "The" or "L'" nearly evenly
    (e.g. "L'Étoile, la Marseillaise"), so about half of the seeded answers name Paris;
    greedy decoding names it every time. That the defaults are exactly 0.2/0.9 is
    asserted in any dtype in ``tests/test_embedded_model.py``.
    """
    answers = [capital_of_france(smollm_f32_server, seed=seed) for seed in range(10)]
    assert sum("Paris" in answer for answer in answers) >= 5, answers


def mixed_load(server: Server) -> dict[str, str]:
    longs = [long_prompt(500 + i, 4500) for i in range(2)]
    decoding = threading.Semaphore(0)
    with concurrent.futures.ThreadPoolExecutor(len(SHORT) + len(longs)) as pool:
        futures = {
            p: pool.submit(stream_chat, server, p, 48, decoding.release, model=MODEL) for p in SHORT
        }
        for _ in SHORT:
            assert decoding.acquire(timeout=300)
        futures |= {p: pool.submit(stream_chat, server, p, 8, model=MODEL) for p in longs}
        results: dict[str, Any] = {p: f.result() for p, f in futures.items()}
    for result in results.values():
        assert result["status"] == 200 and result["done"], result
    return {p: r["text"] for p, r in results.items()}


def test_outputs_identical_across_controllers(smollm_f32_server: Server) -> None:
    modes = {
        "off": {"controller": "off"},
        "dlfp-ct": {"controller": "dlfp-ct"},
        "fixed-16": {"controller": "fixed", "fixed_cap_tokens": 16},
    }
    outputs = {}
    for name, patch in modes.items():
        assert admin(smollm_f32_server, "PATCH", json=patch).status_code == 200
        assert admin(smollm_f32_server, "POST", path="/admin/dlfp/reset").status_code == 200
        before = admin(smollm_f32_server, "GET").json()["state"]["num_mixed_steps"]
        outputs[name] = mixed_load(smollm_f32_server)
        after = admin(smollm_f32_server, "GET").json()["state"]["num_mixed_steps"]
        assert after > before, name  # long prefills really ran beside decodes
    for name in ("dlfp-ct", "fixed-16"):
        differing = [p[:40] for p in outputs["off"] if outputs["off"][p] != outputs[name][p]]
        assert differing == [], (name, differing)
