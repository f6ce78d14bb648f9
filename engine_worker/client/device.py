"""Which device the engine runs on, found without touching CUDA.

``nvidia-smi -L`` lists the GPUs the driver sees (``GPU 0: NVIDIA H100 ...``), the
same test the Makefile makes when it picks the ``gpu`` extra.

NOTE: the gateway process must not ask torch. ``torch.cuda.is_available()`` starts
the CUDA runtime, and vLLM forks its engine core unless ``torch.cuda.is_initialized()``
says otherwise; CUDA then fails in the child ("Cannot re-initialize CUDA in forked
subprocess"). This module imports neither torch nor vLLM.
"""

from __future__ import annotations

import subprocess

from engine_worker.contract.dlfp_config import Device

NVIDIA_SMI_TIMEOUT_S = 10.0
"""Longest ``nvidia-smi -L`` may take; a driver that hangs means no usable GPU."""


def detect_device() -> Device:
    """``cuda`` if ``nvidia-smi -L`` lists at least one GPU, otherwise ``cpu``.

    No ``nvidia-smi`` on ``PATH``, a non-zero exit, a time-out or a list without
    a ``GPU`` line all answer ``cpu``.
    """
    try:
        listed = subprocess.run(
            ["nvidia-smi", "-L"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    if listed.returncode != 0:
        return "cpu"
    has_gpu = any(line.startswith("GPU ") for line in listed.stdout.splitlines())
    return "cuda" if has_gpu else "cpu"
