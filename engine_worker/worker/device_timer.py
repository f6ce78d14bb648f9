"""Each step timed where it executes: the worker's ``execute_model`` plus ``sample_tokens``.

vLLM 0.32 splits a step in two worker calls: ``execute_model(scheduler_output)``
runs the forward pass and returns None when ``sample_tokens(grammar_output)``
must follow (the engine core calls it at once), or returns the output itself (a
step with nothing scheduled, a pooling model). A step's device time is the work
of both, without the host's gaps around them::

    device(k) = end(execute_model(k)) - start(k)
                + end(sample_tokens(k)) - start(sample_tokens(k))

``start(k)`` is the forward's launch where the runner says when that is (Model Runner
V2, CUDA's default, calls ``step_timing.forward_start()`` once the step's inputs are
prepared), else the entry of ``execute_model``. A step whose ``execute_model`` returned
its output has the first term only. On CUDA an event recorded while the device is
still busy completes when the work before it does, so neither term counts the device's
idle time while the host prepares a step, nor the engine core's work between the two
calls (a structured-output bitmask waiting for step k-1's tokens).

- **CPU:** ``time.perf_counter()`` at each mark: the calls run synchronously (and
  the V1 runner has no ``forward_start``, so a step starts at ``execute_model``).
- **CUDA:** a timing event recorded on the current stream at each mark. The stream is never
  synchronised, only a step's own end event once its output is, so every step
  is written before its output reaches the scheduler: on the synchronous path
  the output has already been synchronised when ``sample_tokens`` returns, so
  the pair is read then; under async scheduling the timer waits for the end
  events up to that step once vLLM has waited for its output copy
  (``get_output``). Model Runner V2 runs post-processing kernels beside that
  copy, before the end event, so the event may still be pending when the copy
  is done; ``Event.synchronize()`` then waits only for those kernels
  (microseconds).
- **A step with nothing scheduled** (``total_num_scheduled_tokens == 0``)
  never waits: its end event follows the step still in flight, and waiting
  would break the async overlap. Its time is written once known (at once on
  CPU), possibly after the scheduler read its slot (a missing slot).

The step's index comes from the ``SchedulerOutput`` itself (``STEP_INDEX_ATTR``,
set by the scheduler): the same object in-process, and a pickled copy, the
attribute included, on vLLM's multiprocessing executor. ``sample_tokens`` has
no ``SchedulerOutput``; it always follows its own ``execute_model`` with no
other ``execute_model`` between, so it belongs to the last one started.

Only vLLM's output rank writes (the first tensor-parallel rank of the last
pipeline stage, whose output the executor returns): under pipeline stages that
stage's time, which includes its wait for the previous stage's activations;
under tensor parallelism rank 0's, the ranks being in lockstep. With data
parallelism above 1 none writes (``refuses_data_parallel``).

No vLLM import; torch is imported only for CUDA events.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine_worker.contract.step_ring import STEP_INDEX_ATTR, StepRing

_TIMER_ATTR = "_dlfp_device_timer"
"""Where an installed timer sits on the worker (the install is idempotent)."""


class StepClock(Protocol):
    """Marks instants on the device, and gives the time between two once known."""

    def mark(self) -> Any: ...
    def elapsed_s(self, start: Any, end: Any, *, wait: bool) -> float | None: ...


class PerfCounterClock:
    """Host time: the CPU backend executes a step synchronously in its worker."""

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed_s(self, start: float, end: float, *, wait: bool) -> float:
        return end - start


class CudaEventClock:
    """CUDA timing events on the current stream, read once complete."""

    def mark(self) -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_s(self, start: Any, end: Any, *, wait: bool) -> float | None:
        if not end.query():
            if not wait:
                return None
            end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0


@dataclass(frozen=True, eq=False)
class _Timing:
    step_index: int
    spans: tuple[tuple[Any, Any], ...]
    """(start, end) marks of the step's work, in record order."""


@dataclass(eq=False)
class _OpenStep:
    """A step whose ``execute_model`` started and whose output is not yet known."""

    step_index: int | None
    start: Any
    is_empty: bool
    spans: list[tuple[Any, Any]] = field(default_factory=list)
    """The spans closed so far (``execute_model``'s once it returned None)."""
    sample_start: Any = None


class DeviceStepTimer:
    """Times the worker's two calls of every step and writes each time to the ring."""

    def __init__(self, ring: StepRing, clock: StepClock) -> None:
        self._ring = ring
        self._clock = clock
        self._open: _OpenStep | None = None
        self._pending: deque[_Timing] = deque()
        # NOTE: under async scheduling vLLM's multiprocessing worker calls get_output
        # in its output-copy thread, beside the thread running execute_model.
        self._lock = threading.Lock()
        self.num_written = 0

    def wrap_execute_model(self, execute_model: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(execute_model)
        def timed(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            self.flush()
            step_index = getattr(scheduler_output, STEP_INDEX_ATTR, None)
            is_empty = getattr(scheduler_output, "total_num_scheduled_tokens", None) == 0
            opened = _OpenStep(step_index, self._clock.mark(), is_empty)
            self._open = opened
            output = execute_model(scheduler_output, *args, **kwargs)
            if output is not None:
                self._close(output)
            elif self._open is opened:
                opened.spans.append((opened.start, self._clock.mark()))
            return output

        return timed

    def wrap_forward_start(self, forward_start: Callable[..., Any]) -> Callable[..., Any]:
        """The runner's own mark of the forward's launch: the step's work starts there."""

        @functools.wraps(forward_start)
        def marked(*args: Any, **kwargs: Any) -> Any:
            if self._open is not None and not self._open.spans:
                self._open.start = self._clock.mark()
            return forward_start(*args, **kwargs)

        return marked

    def wrap_sample_tokens(self, sample_tokens: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(sample_tokens)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._open is not None:
                self._open.sample_start = self._clock.mark()
            output = sample_tokens(*args, **kwargs)
            self._close(output)
            return output

        return timed

    def _close(self, output: Any) -> None:
        opened, self._open = self._open, None
        if opened is None or opened.step_index is None:
            return
        end = self._clock.mark()
        last = (opened.start if opened.sample_start is None else opened.sample_start, end)
        timing = _Timing(opened.step_index, (*opened.spans, last))
        with self._lock:
            self._pending.append(timing)
        get_output = getattr(output, "get_output", None)
        if callable(get_output):
            # Async output (CUDA): the step is read once vLLM has waited for its copy.
            output.get_output = self._flush_after(get_output, timing)
        elif opened.is_empty:
            self.flush()  # NOTE: never wait on the step in flight (see the module doc)
        else:
            self.flush(through=timing)

    def _flush_after(self, get_output: Callable[[], Any], timing: _Timing) -> Callable[[], Any]:
        @functools.wraps(get_output)
        def flushed() -> Any:
            result = get_output()
            self.flush(through=timing)
            return result

        return flushed

    def flush(self, *, through: _Timing | None = None) -> None:
        """Write the timings whose end is known, oldest first.

        ``through``: a step whose output is already synchronised; its end event,
        and every earlier one, is waited for (at most the kernels recorded after
        the output copy). Later steps are written only if already complete.
        """
        with self._lock:
            num_to_wait = 0
            for position, pending in enumerate(self._pending):
                if pending is through:
                    num_to_wait = position + 1
                    break
            while self._pending:
                timing = self._pending[0]
                wait = num_to_wait > 0
                # The last end first: once it is complete, so is every earlier mark.
                last_s = self._clock.elapsed_s(*timing.spans[-1], wait=wait)
                if last_s is None:
                    return
                spans = timing.spans[:-1]
                elapsed_s = last_s + sum(self._clock.elapsed_s(*s, wait=True) or 0.0 for s in spans)
                self._pending.popleft()
                num_to_wait -= 1
                self._ring.write(timing.step_index, elapsed_s)
                self.num_written += 1


def refuses_data_parallel(data_parallel_size: int) -> bool:
    """Whether device timing is refused: with data parallelism above 1.

    NOTE: every engine's output rank would write the one ring, and each engine's
    scheduler numbers its steps from 0, so their slots would collide.
    """
    return data_parallel_size > 1


def install(worker: Any, ring: StepRing, *, is_cuda: bool) -> DeviceStepTimer:
    """Wrap ``worker.execute_model`` and ``worker.sample_tokens`` once (idempotent), and
    the model runner's ``step_timing.forward_start`` where it has one (Model Runner V2).

    NOTE: instance attributes, not a subclass: vLLM appends a worker extension to
    the worker's bases and refuses any name the worker already has, so an
    extension cannot override either method. Both executors look the methods up
    on the worker instance at each call (``WorkerWrapperBase`` delegates to it).
    """
    existing = getattr(worker, _TIMER_ATTR, None)
    if isinstance(existing, DeviceStepTimer):
        return existing
    clock: StepClock = CudaEventClock() if is_cuda else PerfCounterClock()
    timer = DeviceStepTimer(ring, clock)
    worker.execute_model = timer.wrap_execute_model(worker.execute_model)
    worker.sample_tokens = timer.wrap_sample_tokens(worker.sample_tokens)
    step_timing: Any = getattr(getattr(worker, "model_runner", None), "step_timing", None)
    if callable(getattr(step_timing, "forward_start", None)):
        step_timing.forward_start = timer.wrap_forward_start(step_timing.forward_start)
    setattr(worker, _TIMER_ATTR, timer)
    return timer
