"""One client's turns at pre-admission work.

A client is its API key, or its address when no keys are configured
(``auth.client_id``). ``Admission`` bounds its requests in flight (``reserve()``); of
them, at most ``max_client_pre_admission`` are templated, tokenized or vetted at a time.
The others wait for a turn here, doing nothing, so one client's costly prompts or
schemas keep at most that many of the shared workers (the tokenizer lock, the grammar
vetter) busy ahead of another client's request. Plain asyncio: no FastAPI import.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from gateway.admission import AdmissionLimits


class ClientShares:
    def __init__(self, limits: Callable[[], AdmissionLimits]) -> None:
        self._limits = limits
        self._workers: dict[str, asyncio.Semaphore] = {}
        self._num_workers: Counter[str] = Counter()

    def num_at_work(self, client: str) -> int:
        """The client's requests holding a turn or waiting for one."""
        return self._num_workers[client]

    @asynccontextmanager
    async def worker(self, client: str) -> AsyncIterator[None]:
        """Waits for one of the client's pre-admission turns, and holds it."""
        semaphore = self._workers.get(client)
        if semaphore is None:
            semaphore = asyncio.Semaphore(self._limits().max_client_pre_admission)
            self._workers[client] = semaphore
        self._num_workers[client] += 1
        try:
            async with semaphore:
                yield
        finally:
            self._num_workers[client] -= 1
            if not self._num_workers[client]:
                del self._num_workers[client]
                del self._workers[client]
