"""The dtype chosen by CPU capability, with injected CPU flags (both CPU kinds, any host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_worker.client.cpu_features import (
    cpu_family_model,
    cpu_model_name,
    read_cpu_flags,
    reported_features,
    resolve_dtype,
)

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


def test_family_and_model_tell_apart_cpus_with_one_name(tmp_path: Path) -> None:
    zen2 = tmp_path / "zen2"
    zen2.write_text("processor\t: 0\ncpu family\t: 23\nmodel\t\t: 49\nmodel name\t: AMD EPYC\n\n")
    zen3 = tmp_path / "zen3"
    zen3.write_text("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n\n")
    assert cpu_model_name(zen2) == cpu_model_name(zen3) == "AMD EPYC"
    assert cpu_family_model(zen2) == "family 23, model 49"
    assert cpu_family_model(zen3) == "family 25, model 1"
    assert cpu_family_model(tmp_path / "missing") == "family ?, model ?"
