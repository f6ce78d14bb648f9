"""The embedded SmolLM2 pinned to float32: what it knows.

NOTE: every test here asserts the model's answers, so the engine runs in float32 on every
CPU, whatever ``DLFP_DTYPE`` the environment sets. ``dtype auto`` follows the CPU
(bfloat16 with AMX, float32 on AVX2-only CPUs), and in bfloat16 the dequantized 135M
model's greedy first token tips from "The" to "L'" (no "Paris"). ``tests/test_embedded_model.py``
runs the same model in the configured dtype and asserts only what holds in any dtype.
That the controller never changes which tokens are computed is checked once, on the
shared engine (``tests/test_engine_dlfp.py``), every controller and plan included.
"""

from __future__ import annotations

import concurrent.futures

import openai
import pytest

from tests.conftest import Server

pytestmark = pytest.mark.engine

MODEL = "smollm2-135m-instruct"


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
    # Sent at once: the count, not each answer, is asserted, so batching cannot matter.
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        answers = list(
            pool.map(lambda seed: capital_of_france(smollm_f32_server, seed=seed), range(10))
        )
    assert sum("Paris" in answer for answer in answers) >= 5, answers
