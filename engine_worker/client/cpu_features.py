"""The CPU's instruction-set features, and the model dtype they call for.

vLLM's CPU backend runs bf16 well only where the CPU has native bf16
(AVX512_BF16 or AMX): there oneDNN takes the matrix products. Without it vLLM
logs "Failed to create oneDNN linear, fallback to torch linear" and bf16
prefill ran about 30 times slower than on an AVX-512 machine, and about 4 times
slower than float32 on the same CPU (docs/scheduler.md, "Defaults that travel"). So
``auto`` means bf16 only on such CPUs and float32 elsewhere; an explicit dtype
always wins, and on CUDA ``auto`` stays vLLM's choice.

Pure Python: no torch, no vLLM.
"""

from __future__ import annotations

import logging
from pathlib import Path

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The flags worth reporting beside a figure (``lscpu`` shows them all)."""


def _cpuinfo_field(field: str, cpuinfo: Path) -> str | None:
    """The first processor's ``field`` in ``/proc/cpuinfo`` (None where absent or unreadable)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == field:
            return value.strip()
    return None


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The ``flags`` of the first processor in ``/proc/cpuinfo`` (empty where unreadable)."""
    return frozenset((_cpuinfo_field("flags", cpuinfo) or "").split())


def cpu_model_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    return _cpuinfo_field("model name", cpuinfo) or "unknown"


def cpu_family_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``family F, model M``: tells apart CPUs that share a model name (AMD EPYC Zen 2, Zen 3)."""
    family = _cpuinfo_field("cpu family", cpuinfo) or "?"
    model = _cpuinfo_field("model", cpuinfo) or "?"
    return f"family {family}, model {model}"


def has_native_bf16(flags: frozenset[str]) -> bool:
    return bool(flags & NATIVE_BF16_FLAGS)


def resolve_dtype(requested: str, device: str, flags: frozenset[str]) -> str:
    """The dtype to pass to vLLM: ``auto`` on CPU becomes bfloat16 or float32 by capability."""
    if requested != "auto" or device != "cpu":
        return requested
    return "bfloat16" if has_native_bf16(flags) else "float32"


def reported_features(flags: frozenset[str]) -> list[str]:
    return [flag for flag in REPORTED_FLAGS if flag in flags]


def configured_dtype(requested: str, device: str) -> tuple[str, list[str]]:
    """The dtype the engine runs (``resolve_dtype`` on this CPU's flags) and the CPU
    features reported beside it, logged once as ``engine_config``."""
    flags = read_cpu_flags()
    dtype = resolve_dtype(requested, device, flags)
    features = reported_features(flags)
    logging.getLogger("dlfp.engine").info(
        "engine configuration",
        extra={
            "event": "engine_config",
            "device": device,
            "dtype_requested": requested,
            "dtype": dtype,
            "cpu_model": cpu_model_name(),
            "cpu_family_model": cpu_family_model(),
            "cpu_features": features,
        },
    )
    return dtype, list(features)
