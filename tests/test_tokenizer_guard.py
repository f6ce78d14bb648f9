"""``held``: the tokenizer lock taken from the event loop without blocking it, and never
left held by a coroutine cancelled while it waited (quick tier, no engine)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from engine_worker.client.tokenizer_guard import held, held_if


async def test_a_free_lock_is_taken_and_given_back() -> None:
    lock = threading.Lock()
    async with held(lock):
        assert lock.locked()
    assert not lock.locked()


async def test_waiting_for_a_busy_lock_does_not_block_the_loop() -> None:
    lock = threading.Lock()
    lock.acquire()  # a worker thread tokenizing
    ticks = 0
    entered = asyncio.Event()

    async def parser() -> None:
        async with held(lock):
            entered.set()

    async def ticker() -> None:
        nonlocal ticks
        while not entered.is_set():
            ticks += 1
            await asyncio.sleep(0.005)

    tasks = [asyncio.create_task(parser()), asyncio.create_task(ticker())]
    async with asyncio.timeout(30):  # a guard against a blocked loop, not a timing claim
        while ticks < 5:
            await asyncio.sleep(0.005)
    assert not entered.is_set()  # the loop ran on, five ticks, while the lock was busy
    threading.Timer(0.0, lock.release).start()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5.0)
    assert entered.is_set() and not lock.locked()


async def test_a_waiter_cancelled_leaves_the_lock_free() -> None:
    lock = threading.Lock()
    lock.acquire()
    waiter = asyncio.create_task(held(lock).__aenter__())
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    lock.release()  # the worker thread that was waiting for it takes it, then hands it back
    for _ in range(200):
        await asyncio.sleep(0.005)
        if lock.acquire(blocking=False):
            break
    else:
        raise AssertionError("the lock stayed held after its waiter was cancelled")
    lock.release()


async def test_held_if_holds_nothing_when_not_needed() -> None:
    lock = threading.Lock()
    async with held_if(False, lock):
        assert not lock.locked()
    async with held_if(True, lock):
        assert lock.locked()
