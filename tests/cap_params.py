"""The controller's parameters for the quick tier: the declared defaults (``CapParams``,
which ``DLFPConfig`` derives from), with the fields a test sets, checked as they are built."""

from __future__ import annotations

from typing import Any

from engine_worker.controller.params import CapParams


def cap_params(**overrides: Any) -> CapParams:
    return CapParams(**overrides)
