"""The two measurement protocols: the paper's GPU one, and its CPU-sized version.

An option given on the command line wins over its protocol's value.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_worker.contract.device_defaults import defaults_for


@dataclass(frozen=True)
class Protocol:
    num_requests: int
    rate_rps: float
    num_warmup: int
    max_tokens: int
    ttft_slo_ms: float
    itl_slo_ms: float


_CUDA, _CPU = defaults_for("cuda").dlfp, defaults_for("cpu").dlfp

PROTOCOLS: dict[str, Protocol] = {
    # arXiv 2609.38386: 100 measured requests at 1.0 request/s, 128 generated tokens each
    # (76,800 paired tokens over 600 requests); SLOs as the gateway's CUDA defaults.
    "gpu": Protocol(
        num_requests=100,
        rate_rps=1.0,
        num_warmup=10,
        max_tokens=128,
        ttft_slo_ms=_CUDA.ttft_slo_ms,
        itl_slo_ms=_CUDA.itl_slo_ms,
    ),
    # A 2-core CPU prefills 2,048 tokens in ~4 s, so 0.2 request/s keeps prefill and decode
    # overlapping without an ever-growing queue (``--calibrate`` shrinks the prompts on a
    # slower CPU). 100 measured requests, so that a trial's P99 is not just its largest
    # value (with 30 it was 0.71 times the largest plus 0.29 times the second); SLOs as the
    # gateway's CPU defaults.
    "cpu": Protocol(
        num_requests=100,
        rate_rps=0.2,
        num_warmup=2,
        max_tokens=128,
        ttft_slo_ms=_CPU.ttft_slo_ms,
        itl_slo_ms=_CPU.itl_slo_ms,
    ),
}
PAPER_SEEDS = (801, 802, 803)
