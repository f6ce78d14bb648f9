"""What one client may hold: requests in flight, and pre-admission workers.

A client is its API key, or its address when no keys are configured
(``auth.client_id``). Its requests in flight (streaming or queued, which ``Admission``
counts, and templated, tokenized or vetted, counted here) are at most
``max_client_requests``: the concurrency plus its share of the queue. Past it a request
is refused at once (429, ``client_share``). Of them, at most
``max_client_pre_admission`` do their pre-admission work at a time; the others wait
for a turn here, doing nothing, so one client's costly prompts or schemas keep at most
that many of the shared workers (the tokenizer lock, the grammar vetter) busy ahead of
another client's request. Plain asyncio: no FastAPI import.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

from gateway.admission import AdmissionLimits, AdmissionRejected


class ClientShares:
    def __init__(self, limits: Callable[[], AdmissionLimits]) -> None:
        self._limits = limits
        self._places: Counter[str] = Counter()
        self._workers: dict[str, asyncio.Semaphore] = {}
        self._num_workers: Counter[str] = Counter()

    def num_places(self, client: str) -> int:
        return self._places[client]

    @contextmanager
    def place(self, client: str, num_admitted: int, retry_after_s: int) -> Iterator[None]:
        """Counts a request of ``client`` through its pre-admission work, or refuses it;
        ``num_admitted``: the client's requests streaming or queued already."""
        limits = self._limits()
        limit = limits.max_client_requests()
        if self._places[client] + num_admitted >= limit:
            raise AdmissionRejected(
                "client_share",
                f"this client already has {limit} requests in flight "
                "(DLFP_MAX_CONCURRENT and DLFP_MAX_CLIENT_QUEUE_SHARE of the queue)",
                retry_after_s,
            )
        self._places[client] += 1
        try:
            yield
        finally:
            self._places[client] -= 1
            if not self._places[client]:
                del self._places[client]

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
