"""The controller's modes and choices, as enums: what the settings name and the control
laws compare. Standard library only; ``contract.dlfp_config`` validates them at the edge.
"""

from __future__ import annotations

from enum import StrEnum


class ControllerMode(StrEnum):
    """What caps the prefill chunk while at least one request is decoding."""

    OFF = "off"
    """vLLM's own behaviour: no cap."""
    FIXED = "fixed"
    """A constant cap of ``fixed_cap_tokens``."""
    DLFP = "dlfp"
    """The paper's controller: observation = interval between scheduler calls."""
    DLFP_CT = "dlfp-ct"
    """Completion-timed controller: observation = busy time of the completed step."""


class PrefillOrder(StrEnum):
    """Which prefills a capped step serves first."""

    FCFS = "fcfs"
    """vLLM's order: running prefills, then the waiting queue."""
    SRPF = "srpf"
    """Shortest remaining prefill first, waiting or partially prefilled."""


class Observation(StrEnum):
    """What ``dlfp-ct`` feeds back for a completed mixed step."""

    BUSY = "busy"
    """``done(k) - max(done(k-1), dispatched(k))``: the executor's time on step k alone."""
    COMPLETION = "completion"
    """``done(k) - done(k-1)``: what a stream served by consecutive steps waits."""
    MAX = "max"
    """The larger of the two."""
    DEVICE = "device"
    """The step's time where it executes (the worker's ``execute_model`` plus
    ``sample_tokens``); ``completion`` for a step without one."""


class Plan(StrEnum):
    """How ``dlfp-ct`` sizes a mixed step from its cost model."""

    DEADLINE = "deadline"
    """The largest prefill whose predicted end, times a margin for the tail, meets the
    running streams' tightest deadline (last token + itl_slo_ms)."""
    TARGET = "target"
    """The largest prefill whose predicted time fits ``allowance x target_ms``."""
