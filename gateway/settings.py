"""Start-up settings: ``DLFP_*`` environment variables, a ``.env`` file, or CLI options.

Every field here is also a ``dlfp-gateway serve`` option (``--max-model-len`` for
``max_model_len``); the field's docstring is its help text. The DLFP controller
fields left unset take the per-device defaults of ``DLFPConfig.defaults_for``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine_worker.dlfp_config import (
    ControllerMode,
    Device,
    DLFPConfig,
    Observation,
    PrefillOrder,
)
from gateway.admission import AdmissionLimits

DLFP_FIELDS = tuple(DLFPConfig.model_fields)


class Settings(BaseSettings):
    """Everything the gateway reads once at start-up."""

    model_config = SettingsConfigDict(
        env_prefix="DLFP_",
        env_file=".env",
        extra="ignore",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    # --- HTTP server ---
    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port to listen on."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Log level of the gateway's structured (JSON lines) log."""

    # --- model and engine ---
    model: str | None = None
    """Local Hugging Face model directory; unset = the embedded SmolLM2-135M-Instruct."""
    served_model_name: str | None = None
    """Model name clients send; default: smollm2-135m-instruct, or the model directory's name."""
    model_cache_dir: Path | None = None
    """Where the embedded model is converted to (default $XDG_CACHE_HOME/dlfp-gateway/models)."""
    max_model_len: int = Field(default=4096, ge=16)
    """Context length: prompt plus generated tokens."""
    max_num_batched_tokens: int | None = Field(default=None, ge=16)
    """vLLM's token budget per scheduler step; default 2048 on CPU, 8192 on CUDA."""
    max_num_seqs: int = Field(default=64, ge=1)
    """Most requests the engine runs at once."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the engine runs; auto = CUDA if a GPU is visible, otherwise CPU."""
    dtype: str = "auto"
    """Model dtype passed to vLLM (auto, bfloat16, float16, float32)."""
    kv_cache_gib: float = Field(default=2.0, gt=0)
    """CPU only: memory reserved for the KV cache, in GiB."""
    engine_args: dict[str, str] = Field(default_factory=dict)
    """Extra vLLM engine arguments, name=value (JSON object in DLFP_ENGINE_ARGS)."""
    max_tokens_limit: int = Field(default=4096, ge=1)
    """Largest max_tokens a request may ask for."""

    # --- DLFP controller (unset = per-device default) ---
    controller: ControllerMode | None = None
    """Prefill-cap controller: off, fixed, dlfp or dlfp-ct (default dlfp-ct)."""
    target_ms: float | None = Field(default=None, gt=0)
    """Target duration of a mixed prefill+decode iteration, ms."""
    gain: float | None = Field(default=None, gt=0, le=1)
    """Controller gain, 0 < gain <= 1."""
    initial_cap_tokens: int | None = Field(default=None, ge=1)
    """Prefill cap before the first observation, tokens."""
    min_cap_tokens: int | None = Field(default=None, ge=1)
    """Lower bound of the prefill cap, tokens."""
    max_cap_tokens: int | None = Field(default=None, ge=1)
    """Upper bound of the prefill cap, tokens."""
    step_tokens: int | None = Field(default=None, ge=1)
    """Quantum of the prefill cap, tokens."""
    fixed_cap_tokens: int | None = Field(default=None, ge=1)
    """Cap of the fixed controller, tokens."""
    prefill_order: PrefillOrder | None = None
    """Which prefills a capped step serves first: fcfs (vLLM's order) or srpf (default)."""
    feedforward: bool | None = None
    """dlfp-ct only: size each mixed step from the online cost model (default true)."""
    observation: Observation | None = None
    """dlfp-ct only: step time fed back: busy, completion or max (default completion)."""
    ttft_slo_ms: float | None = Field(default=None, gt=0)
    """Time-to-first-token objective, ms."""
    itl_slo_ms: float | None = Field(default=None, gt=0)
    """Inter-token-latency objective, ms."""

    # --- admission control (runtime-tunable through /admin/admission) ---
    max_concurrent: int = Field(default=32, ge=1)
    """Most requests streaming at once; more wait in the queue."""
    max_queue: int = Field(default=128, ge=0)
    """Most requests waiting for a slot; past it, 429."""
    max_queue_wait_s: float = Field(default=60.0, gt=0)
    """Longest wait for a slot; past it, 429."""
    drain_s: float = Field(default=30.0, ge=0)
    """On SIGTERM: how long streams in flight may run before the engine stops."""
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """vLLM's scheduling policy; with priority, a request's priority also orders the engine."""

    # --- security and limits ---
    admin_token: SecretStr | None = None
    """Bearer token for /admin/*; unset = admin answers only loopback clients."""
    api_keys: str = ""
    """Comma-separated bearer keys that protect /v1/*; empty = open."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Largest request body accepted, bytes."""

    def dlfp_config(self, device: Device) -> DLFPConfig:
        """The controller settings in force at start: explicit values over device defaults."""
        explicit = {name: getattr(self, name) for name in DLFP_FIELDS}
        overrides = {name: value for name, value in explicit.items() if value is not None}
        base = DLFPConfig.defaults_for(device).model_dump()
        return DLFPConfig.model_validate(base | overrides)

    def admission_limits(self) -> AdmissionLimits:
        return AdmissionLimits(
            max_concurrent=self.max_concurrent,
            max_queue=self.max_queue,
            max_queue_wait_s=self.max_queue_wait_s,
        )

    def api_key_set(self) -> frozenset[str]:
        return frozenset(key.strip() for key in self.api_keys.split(",") if key.strip())
