"""The engine's tokenizer, shared by the event loop and worker threads.

HF fast tokenizers must not be used from two threads at once, and the gateway uses
the engine's tokenizer in both: worker threads template, tokenize and build
non-streamed replies; the event loop runs the output parsers of a stream; and vLLM's
renderer thread tokenizes a request's ``bad_words`` while it is added. Every use holds
the engine's ``tokenizer_lock`` (a ``threading.Lock``). ``held`` takes it from the
event loop without blocking the loop: at once when it is free, else by a worker thread
that waits for it. Other users wait while it is held, so hold it only for the
tokenizer's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager


@contextlib.asynccontextmanager
async def held(lock: threading.Lock) -> AsyncIterator[None]:
    """``async with held(lock)``: hold a threading lock from a coroutine."""
    if not lock.acquire(blocking=False):
        acquiring = asyncio.get_running_loop().run_in_executor(None, lock.acquire)
        try:
            await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            # NOTE: the worker thread takes the lock in the end all the same; hand it
            # back then, or every later user of the tokenizer waits forever.
            acquiring.add_done_callback(lambda _: lock.release())
            raise
    try:
        yield
    finally:
        lock.release()


def held_if(needed: bool, lock: threading.Lock) -> AbstractAsyncContextManager[None]:
    """``held(lock)`` where ``needed``, else nothing to hold."""
    return held(lock) if needed else contextlib.nullcontext()
