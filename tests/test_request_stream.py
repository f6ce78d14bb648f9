"""``RequestStream``: the one way an engine request ends early (engine_worker/contract/api.py)."""

from __future__ import annotations

from engine_worker.contract.api import ChoiceDelta, GenerationChunk, RequestStream


class _Counted(RequestStream):
    """A stream of ``length`` chunks that counts its aborts and releases."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.length, self.sent, self.aborts, self.releases = length, 0, 0, 0

    async def _next(self) -> GenerationChunk:
        self.sent += 1
        delta = ChoiceDelta(index=0, text="x", token_ids=[self.sent])
        return GenerationChunk([delta], num_prompt_tokens=1, finished=self.sent == self.length)

    async def first_output(self) -> bool:
        return self.length > 0

    def _release(self) -> None:
        self.releases += 1

    async def _abort(self) -> None:
        self.aborts += 1


async def test_closed_before_its_first_chunk_it_aborts() -> None:
    stream = _Counted(3)
    await stream.aclose()
    await stream.aclose()
    assert (stream.aborts, stream.releases, stream.sent) == (1, 1, 0)
    assert [chunk async for chunk in stream] == []


async def test_closed_half_way_it_aborts_once() -> None:
    stream = _Counted(3)
    await anext(stream)
    await stream.aclose()
    assert (stream.aborts, stream.releases) == (1, 1)


async def test_read_to_the_end_it_releases_and_never_aborts() -> None:
    stream = _Counted(3)
    chunks = [chunk async for chunk in stream]
    assert [c.finished for c in chunks] == [False, False, True]
    await stream.aclose()
    assert (stream.aborts, stream.releases, stream.sent) == (0, 1, 3)
