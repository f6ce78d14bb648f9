"""One engine step of vLLM's real ``Scheduler``, built in-process for the scheduler tests.

The scheduler, its requests and the fake model runner's output come from
``bench.harness.scheduler_factory`` (re-exported here for the fixtures in ``conftest``);
test modules wrap ``build_scheduler`` in a fixture.
"""

from __future__ import annotations

from collections.abc import Callable

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler

from bench.harness.scheduler_factory import (
    build_scheduler,
    make_request,
    runner_output,
    write_tiny_model,
)

__all__ = ["build_scheduler", "make_request", "run_step", "write_tiny_model"]


def run_step(
    scheduler: Scheduler, executed: Callable[[SchedulerOutput], None] | None = None
) -> SchedulerOutput:
    """One synchronous engine step with a fake model runner; ``executed`` sees the
    scheduler's output where a worker would, before ``update_from_output``."""
    output = scheduler.schedule()
    if executed is not None:
        executed(output)
    scheduler.update_from_output(output, runner_output(scheduler, output))
    return output
