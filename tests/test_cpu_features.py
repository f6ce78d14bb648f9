"""The dtype chosen by CPU capability, with injected CPU flags (both CPU kinds, any host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_worker.cpu_features import read_cpu_flags, reported_features, resolve_dtype

AVX512_BF16 = frozenset({"avx2", "fma", "avx512f", "avx512_bf16"})
AMX = frozenset({"avx2", "fma", "avx512f", "amx_bf16", "amx_tile"})
AVX2_ONLY = frozenset({"avx2", "fma"})


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (AVX512_BF16, "bfloat16"),
        (AMX, "bfloat16"),
        (AVX2_ONLY, "float32"),
        (frozenset(), "float32"),
    ],
)
def test_auto_on_cpu_follows_native_bf16(flags: frozenset[str], expected: str) -> None:
    assert resolve_dtype("auto", "cpu", flags) == expected


def test_explicit_dtype_and_cuda_are_left_alone() -> None:
    assert resolve_dtype("bfloat16", "cpu", AVX2_ONLY) == "bfloat16"
    assert resolve_dtype("float32", "cpu", AVX512_BF16) == "float32"
    assert resolve_dtype("auto", "cuda", AVX2_ONLY) == "auto"


def test_flags_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test\nflags\t\t: fpu avx2 fma sse4_2\n\n")
    flags = read_cpu_flags(cpuinfo)
    assert {"avx2", "fma"} <= flags and "avx512f" not in flags
    assert reported_features(flags) == ["avx2", "fma"]
    assert read_cpu_flags(tmp_path / "missing") == frozenset()
