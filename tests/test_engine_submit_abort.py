"""A submission that fails after vLLM registered the request leaves nothing behind.

The real ``AsyncLLM`` on the tiny model, in this process, so that vLLM's output
processor can be read: it must hold no unfinished request after a failed submit.
The gateway refuses a lone surrogate before the engine (``protocol.check_text``);
here it is passed to ``VLLMEngine.submit`` directly, as the one input vLLM itself
accepts, registers and only then fails to encode for the engine core.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine_worker.client.engine import EngineSpec, VLLMEngine
from engine_worker.contract.api import InvalidRequestError, SamplingOptions
from engine_worker.contract.dlfp_config import DLFPConfig

pytestmark = pytest.mark.engine


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def engine(tiny_model_dir: Path) -> AsyncIterator[VLLMEngine]:
    # float32 as the session gateway; the test does not depend on numerics.
    spec = EngineSpec(
        str(tiny_model_dir), "tiny", "cpu", 1024, 256, 8, "float32", DLFPConfig(), kv_cache_gib=1
    )
    built = VLLMEngine(spec)
    await built.start()
    yield built
    await built.shutdown()


def _unfinished(engine: VLLMEngine) -> int:
    processor: Any = engine._llm.output_processor
    return int(processor.get_num_unfinished_requests())


@pytest.mark.asyncio(loop_scope="session")
async def test_an_encoding_failure_after_registration_is_aborted(engine: VLLMEngine) -> None:
    assert _unfinished(engine) == 0
    options = SamplingOptions(max_tokens=4, stop=("\ud800",))
    for i in range(3):
        with pytest.raises(InvalidRequestError):
            await engine.submit(f"lone-stop-{i}", [1, 2, 3, 4], options)
    assert _unfinished(engine) == 0
    assert not engine._llm.output_processor.external_req_ids


@pytest.mark.asyncio(loop_scope="session")
async def test_any_failure_after_registration_is_aborted(
    engine: VLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = engine._llm.engine_core

    async def fail(request: Any) -> None:
        raise RuntimeError("the engine core refused the request")

    monkeypatch.setattr(core, "add_request_async", fail)
    with pytest.raises(RuntimeError):
        await engine.submit("core-fails", [1, 2, 3, 4], SamplingOptions(max_tokens=4))
    assert _unfinished(engine) == 0
    monkeypatch.undo()
    # The engine still serves.
    stream = await engine.submit("after", [1, 2, 3, 4], SamplingOptions(max_tokens=2))
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].finished and _unfinished(engine) == 0


@pytest.mark.asyncio(loop_scope="session")
async def test_closing_a_stream_aborts_it_whether_or_not_it_was_read(engine: VLLMEngine) -> None:
    options = SamplingOptions(max_tokens=200, ignore_eos=True)
    never_read = await engine.submit("never-read", [1, 2, 3, 4], options)
    read_once = await engine.submit("read-once", [1, 2, 3, 4], options)
    assert not (await anext(read_once)).finished
    assert _unfinished(engine) == 2
    await never_read.aclose()
    await read_once.aclose()
    await read_once.aclose()  # idempotent
    assert _unfinished(engine) == 0
    assert [chunk async for chunk in read_once] == []
