"""The controller's parameters for the quick tier: the CPU defaults (``DLFPConfig``), with
the fields a test sets, checked as the controller checks them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine_worker.contract.dlfp_config import DLFPConfig
from engine_worker.controller.params import CapParams


def cap_params(**overrides: Any) -> CapParams:
    return replace(CapParams.from_config(DLFPConfig()), **overrides)
