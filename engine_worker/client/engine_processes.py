"""The engine core's processes, seen from the gateway: the ``AsyncLLM`` class it
builds, and how they are stopped, whether the engine is still starting or running."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

logger = logging.getLogger("dlfp.engine")

ENGINE_STOP_TIMEOUT_S = 15.0
"""How long the engine core gets to stop before vLLM kills it: its own teardown waits
5 s for its workers, then sends them SIGTERM and waits 4 s more; vLLM's default of 5 s
killed it while it waited, before it unlinked its shared memory."""


def _kill_engine_processes() -> None:
    """Kill the engine-core processes this process started, and their workers."""
    import multiprocessing

    from vllm.utils.system_utils import kill_process_tree

    for proc in multiprocessing.active_children():
        if proc.name.startswith("EngineCore") and proc.pid is not None:
            logger.info(
                "stopping an engine still starting",
                extra={"event": "engine_start_aborted", "pid": proc.pid},
            )
            kill_process_tree(proc.pid)
            proc.join(10)


async def _stop_output_handler(llm: Any) -> None:
    """Cancel the task that reads the engine core's outputs, before the core stops.

    NOTE: ``AsyncLLM.shutdown`` stops the engine core first and cancels this task after;
    in between the task reads the core's death as an ``EngineDeadError`` and logs it
    with a traceback ("AsyncLLM output_handler failed"). By now no stream is left.
    """
    task = getattr(llm, "output_handler", None)
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _is_catching_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (Linux ``/proc``; True if unknown)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError):
        pass
    return True


def _wait_for_exiting_engine_cores(timeout_s: float) -> None:
    """Let an engine core that is already stopping finish before vLLM signals it.

    NOTE: a terminal's Ctrl-C reaches the whole process group, so the engine core gets
    SIGINT too and starts its own teardown, which resets SIGTERM to the default first.
    The SIGTERM that ``AsyncLLM.shutdown`` then sends would kill it mid-teardown: its
    workers orphaned, the shared memory it created never unlinked ("leaked
    shared_memory" from the resource tracker it shares with this process).
    """
    import multiprocessing

    for proc in multiprocessing.active_children():
        pid = proc.pid
        if proc.name.startswith("EngineCore") and pid is not None and not _is_catching_sigterm(pid):
            proc.join(timeout_s)


def _async_llm_class() -> Any:
    """``AsyncLLM`` whose ``__del__`` does nothing once it has been shut down.

    NOTE: the engine is built in a worker thread, and imports made during the build
    keep frames of that thread alive (through ``f_back``) until the interpreter exits,
    their locals with them, the AsyncLLM among them. vLLM's ``__del__`` shuts it down
    again then, after module globals are cleared ("TypeError: 'NoneType' object is not
    callable"). ``shutdown`` here is explicit, so a second one is never needed.
    """
    from vllm.v1.engine.async_llm import AsyncLLM

    class GatewayAsyncLLM(AsyncLLM):  # type: ignore[misc]
        _is_shut_down = False

        def shutdown(self, timeout: float | None = None) -> None:
            self._is_shut_down = True
            super().shutdown(timeout=timeout)

        def __del__(self) -> None:
            if not self._is_shut_down:
                super().__del__()

    return GatewayAsyncLLM
