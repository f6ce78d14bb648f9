"""The engine core's DLFP controller as ``/admin`` reaches it.

Each call is bounded by ``admin_call_timeout_s`` and any failure of it is a 503; ``check``
refuses at once while the engine cannot serve.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from engine_worker.contract.api import (
    Engine,
    EngineDeadError,
    EngineNotReadyError,
    InvalidRequestError,
)
from gateway.errors import APIError
from gateway.serving_status import ServingStatus

_T = TypeVar("_T")


class ControllerCalls:
    def __init__(self, engine: Engine, serving: ServingStatus, timeout_s: float) -> None:
        self.engine = engine
        self._serving = serving
        self._timeout_s = timeout_s

    def check(self) -> None:
        """A 503 while the engine is loading, down or hung."""
        self._serving.check_engine()

    async def run(self, call: Awaitable[_T]) -> _T:
        """An engine-core call with ``admin_call_timeout_s``; any failure of it is a 503.

        NOTE: a call that timed out may still run in the engine core later (it answers
        between steps); GET shows what the scheduler runs with as ``settings_in_engine``."""
        timeout_s = self._timeout_s
        try:
            return await asyncio.wait_for(call, timeout_s)
        except TimeoutError as exc:
            raise APIError(
                503,
                f"the engine core did not answer within {timeout_s:g} s",
                code="engine_timeout",
                headers={"Retry-After": "5"},
            ) from exc
        except (APIError, InvalidRequestError, EngineDeadError, EngineNotReadyError):
            raise
        except Exception as exc:  # e.g. a failed utility call in the engine core
            raise APIError(503, f"the engine core call failed: {exc}", code="engine_error") from exc
