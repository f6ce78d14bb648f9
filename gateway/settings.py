"""Start-up settings: ``DLFP_*`` environment variables, a ``.env`` file, or CLI options.

Every field here is also a ``dlfp-gateway serve`` option (``--max-model-len`` for
``max_model_len``); the field's docstring is its help text.

The controller's settings are declared once, in ``CapParams`` (``DLFPConfig`` is the
pydantic model derived from it), and the admission
limits once, in ``AdmissionLimits``: their fields are copied here (a DLFP field as an
optional override, unset = the per-device default), with the same types, bounds and
docstrings, so a field added there is an option and a variable here with no code.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import (
    BaseModel,
    Field,
    FilePath,
    PrivateAttr,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from engine_worker.contract.device_defaults import defaults_for
from engine_worker.contract.dlfp_config import Device, DLFPConfig
from gateway.admission import AdmissionLimits
from gateway.errors import first_error
from gateway.tenants import TenantError, Tenants, build_tenants

DLFP_FIELDS = tuple(DLFPConfig.model_fields)
ADMISSION_FIELDS = tuple(AdmissionLimits.model_fields)
SECRET_FIELDS = ("admin_token", "api_keys", "priority_api_keys", "metrics_token", "redis_url")
"""Settings that may also come from a file: ``DLFP_<NAME>_FILE`` names it (Docker's
``*_FILE`` convention, for compose secrets and mounted Kubernetes Secrets)."""
SECRET_VARIABLES = frozenset(
    f"DLFP_{name.upper()}{suffix}" for name in SECRET_FIELDS for suffix in ("", "_FILE")
)
"""The variables that carry a secret or name its file (``drop_secret_variables``)."""
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _copied_fields(model: type[BaseModel], optional: bool) -> dict[str, Any]:
    """``model``'s fields for ``create_model``: same type and bounds; ``optional``
    makes each default to None (unset)."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if optional:
            copy = FieldInfo.merge_field_infos(info, default=None)
            fields[name] = (Optional[info.annotation], copy)  # noqa: UP045 (a runtime type)
        else:
            fields[name] = (info.annotation, FieldInfo.merge_field_infos(info))
    return fields


if TYPE_CHECKING:  # the fields are read by name (getattr); mypy sees plain models

    class _DLFPOverrides(BaseModel): ...

    class _AdmissionFields(BaseModel): ...

else:
    _DLFPOverrides = create_model("DLFPOverrides", **_copied_fields(DLFPConfig, optional=True))
    _AdmissionFields = create_model(
        "AdmissionFields", **_copied_fields(AdmissionLimits, optional=False)
    )


class SettingsError(ValueError):
    """A setting failed validation; the message is one line naming it."""


class _SecretFiles(PydanticBaseSettingsSource):
    """The ``DLFP_<NAME>_FILE`` variables of ``SECRET_FIELDS``: each file's text, stripped,
    is its setting. An option wins over it and it wins over ``.env``; a variable and its
    ``_FILE`` twin together are an error, as are a file that cannot be read and an empty
    admin-token file (which would lock /admin with no word)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads all the files at once

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in SECRET_FIELDS:
            variable = f"DLFP_{name.upper()}"
            path = os.environ.get(f"{variable}_FILE")
            if not path:
                continue
            if variable in os.environ:
                raise SettingsError(f"set {variable} or {variable}_FILE, not both")
            try:
                values[name] = Path(path).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise SettingsError(f"{variable}_FILE: cannot read {path}: {exc}") from exc
            if name == "admin_token" and not values[name]:
                raise SettingsError(
                    f"{variable}_FILE: {path} is empty: put the admin token in it, or unset "
                    f"{variable}_FILE to leave /admin to loopback clients"
                )
        return values


class Settings(BaseSettings, _DLFPOverrides, _AdmissionFields):
    """Everything the gateway reads once at start-up."""

    model_config = SettingsConfigDict(
        env_prefix="DLFP_",
        env_file=".env",
        extra="ignore",
        use_attribute_docstrings=True,
        validate_default=True,
        allow_inf_nan=False,
    )
    _tenants: Tenants | None = PrivateAttr(default=None)

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
    max_num_seqs: int | None = Field(default=None, ge=1)
    """Most requests the engine runs at once; default 64 on CPU, 256 on CUDA."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the engine runs; auto = CUDA if `nvidia-smi -L` lists a GPU, otherwise CPU."""
    dtype: str = "auto"
    """Model dtype passed to vLLM (auto, bfloat16, float16, float32)."""
    kv_cache_gib: float = Field(default=2.0, gt=0)
    """CPU only: memory reserved for the KV cache, in GiB."""
    engine_args: dict[str, str] = Field(default_factory=dict)
    """Extra vLLM engine arguments, name=value (JSON object in DLFP_ENGINE_ARGS)."""

    @field_validator("engine_args", mode="before")
    @classmethod
    def _engine_arg_values_as_text(cls, value: object) -> object:
        # JSON true/false/numbers in DLFP_ENGINE_ARGS mean what their text means.
        if isinstance(value, dict):
            return {
                k: str(v).lower()
                if isinstance(v, bool)
                else str(v)
                if isinstance(v, int | float)
                else v
                for k, v in value.items()
            }
        return value

    max_tokens_limit: int = Field(default=4096, ge=1)
    """Largest max_tokens a request may ask for."""
    default_max_tokens: int | None = Field(default=None, ge=1)
    """max_tokens of a request that sets none (max_output_tokens on /v1/responses): unset =
    the model's generation config (max_new_tokens), else up to the context."""
    max_reply_tokens: int = Field(default=131_072, ge=1)
    """Largest non-streamed reply, as n x max_tokens x (1 + top_logprobs): it is built
    whole on the event loop (about 5 ms per thousand), so a bigger one must stream."""
    generation_config: Literal["auto", "vllm"] = "auto"
    """Sampling defaults for fields a request leaves unset: auto = the model's
    generation_config.json, vllm = vLLM's neutral defaults."""
    tool_call_parser: str = Field(default="hermes", min_length=1)
    """vLLM's tool-call parser for tool_choice auto (hermes, qwen3_xml, llama3_json, ...)."""
    reasoning_parser: str | None = None
    """vLLM's reasoning parser (qwen3, deepseek_r1, ...); unset = thinking text stays in content."""
    chat_template: FilePath | None = None
    """A Jinja file replacing the served model's chat template (e.g. one that renders tools)."""

    startup_fit_s: float = Field(default=20.0, ge=0, le=600)
    """Time budget at start for fitting the DLFP cost model on real short requests through
    the engine, before /ready turns 200 (logged as cost_model_fit); 0 = no fit, the model
    then learns from the first client steps."""

    # --- engine health ---
    engine_stall_s: float = Field(default=300.0, ge=1)
    """With requests in the engine and no engine output for this long, the engine counts
    as hung (like a dead one: /ready 503, 503s, exit 1). Keep it well above the slowest
    legitimate step: over 60 s has been seen on a CPU without AVX-512 in bf16."""
    admin_call_timeout_s: float = Field(default=60.0, gt=0)
    """Longest an /admin call waits for the engine core (it answers between steps); 503 past it."""

    # --- lifecycle (the admission limits are copied from AdmissionLimits) ---
    drain_s: float = Field(default=30.0, ge=0)
    """On SIGTERM: how long streams in flight may run before the engine stops."""
    header_timeout_s: float = Field(default=5.0, gt=0, le=300)
    """A connection that has not sent a whole request head this long after it opened is
    closed (idle sockets would otherwise hold the server's connections)."""
    probe_port: int | None = Field(default=None, ge=1, le=65535)
    """A listener of its own for /health and /ready, which client connections cannot
    take; unset = none (the serving port answers them too). The images and manifests
    set 8001."""
    max_connections: int = Field(default=4096, ge=64)
    """Most open connections on the serving port; past it new ones get a 503."""
    stream_write_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """A stream whose socket write makes no progress for this long (a client that stopped
    reading) is ended: its engine request aborted, its slot freed (outcome client_stalled).
    A write waits for uvicorn's buffer to drain by 48 KB, so a reader slower than 48 KB
    in this time counts as stalled."""
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """vLLM's scheduling policy; with priority, a request's priority also orders the engine."""

    # --- stored responses (/v1/responses) ---
    response_store: Literal["memory", "redis"] = "memory"
    """Where /v1/responses keeps what previous_response_id, item_reference and
    GET /v1/responses/{id} read: memory = this process; redis = DLFP_REDIS_URL, shared by
    every replica that names it."""
    redis_url: SecretStr | None = None
    """The Redis of the redis response store (redis://[:password@]host:port/db), a secret:
    or from the file DLFP_REDIS_URL_FILE names."""
    response_store_max_entries: int = Field(default=10_000, ge=1)
    """Most responses stored; past it the oldest go first."""
    response_store_max_bytes: int = Field(default=268_435_456, ge=1024)
    """Most bytes of stored responses (each with the conversation before it, as JSON);
    past it the oldest go first."""
    response_store_ttl_s: float = Field(default=86_400.0, gt=0)
    """How long a response stays stored after it is made."""

    # --- security and limits (the SECRET_FIELDS may also come from DLFP_<NAME>_FILE) ---
    admin_token: SecretStr | None = None
    """Bearer token for /admin/*; unset = admin answers only loopback clients (127.0.0.1,
    ::1) and DLFP_TRUSTED_PROXIES; empty is an error. Or from the file
    DLFP_ADMIN_TOKEN_FILE names."""
    trusted_proxies: str = ""
    """Addresses or CIDR networks, comma-separated or one a line, that /admin answers
    without an admin token as it answers loopback (a sidecar proxy connecting from
    127.0.0.6, say); empty = loopback only; no effect once an admin token is set."""
    api_keys: str = ""
    """Bearer keys that protect /v1/*, comma-separated or one a line; empty = open (logged
    as api_open when listening beyond loopback). Or from the file DLFP_API_KEYS_FILE names."""
    priority_api_keys: str = ""
    """Bearer keys allowed priorities below 0, comma-separated or one a line; empty =
    nobody. Or from the file DLFP_PRIORITY_API_KEYS_FILE names."""
    tenants_file: Path | None = None
    """A TOML file of tenants, read once at start: each a name, its keys (or keys_file),
    and optionally weight, max_concurrent, max_queued, requests_per_minute,
    tokens_per_minute, priority, ttft_slo_ms and itl_slo_ms (docs/tenants.md); unset = a
    tenant per key of DLFP_API_KEYS (key-1, key-2, ...), or one tenant, default, without
    keys."""
    metrics_token: SecretStr | None = None
    """Bearer token for /metrics, for the scraper (not an API key); unset or empty = open
    (logged as metrics_open when listening beyond loopback). Or from the file
    DLFP_METRICS_TOKEN_FILE names."""
    protect_docs: bool = False
    """/docs, /redoc, /openapi.json and /dashboard require an API key, as /v1/* does."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Largest request body accepted, bytes."""
    max_body_values: int = Field(default=131_072, ge=1024)
    """Most JSON values a /v1 body may hold (counted from its bytes before it is parsed):
    a body of tiny values costs the event loop more to parse and check than its size says."""
    max_tools: int = Field(default=128, ge=0, le=128)
    """Most tools a request may declare (OpenAI's own limit is 128)."""
    max_schema_depth: int = Field(default=32, ge=1, le=1000)
    """Deepest nesting of a JSON schema (a tool's parameters or response_format): vLLM
    compiles each schema to a grammar with no time-out, on a worker every request shares."""
    max_schema_bytes: int = Field(default=65_536, ge=64)
    """Largest JSON schema, bytes of compact JSON (a tool's parameters or response_format)."""
    grammar_compile_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """Longest a request's grammar (schema, forced tool call) may take to compile; 400 past it."""

    @model_validator(mode="after")
    def _tenants_file_is_valid(self) -> Settings:
        if self.tenants_file is not None:
            try:
                self._tenants = build_tenants(
                    _entries(self.api_keys), self.priority_key_set(), self.tenants_file
                )
            except TenantError as exc:
                raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _redis_store_has_a_url(self) -> Settings:
        if self.response_store == "redis" and self.redis_url is None:
            raise ValueError("response_store redis needs DLFP_REDIS_URL (or DLFP_REDIS_URL_FILE)")
        return self

    @field_validator("metrics_token", "redis_url", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: object) -> object:
        # An empty Secret key or file keeps /metrics open, as an empty DLFP_API_KEYS keeps /v1.
        return None if value == "" else value

    @field_validator("admin_token", mode="before")
    @classmethod
    def _admin_token_is_not_empty(cls, value: object) -> object:
        # NOTE: no client sends an empty bearer token, so an empty one would refuse every
        # /admin call, loopback included, where unset leaves /admin to loopback.
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and not text.strip():
            raise ValueError("empty: set a token, or leave it unset for loopback-only /admin")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies_are_networks(cls, value: str) -> str:
        _networks(value)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        secret_files = _SecretFiles(settings_cls)
        return init_settings, env_settings, secret_files, dotenv_settings, file_secret_settings

    def dlfp_config(self, device: Device) -> DLFPConfig:
        """The controller settings in force at start: explicit values over device defaults.

        Raises ``SettingsError`` (one line) if the combination is invalid."""
        explicit = {name: getattr(self, name) for name in DLFP_FIELDS}
        overrides = {name: value for name, value in explicit.items() if value is not None}
        base = defaults_for(device).dlfp.model_dump()
        try:
            return DLFPConfig.model_validate(base | overrides)
        except ValidationError as exc:
            raise SettingsError(describe_error(exc)) from exc

    def admission_limits(self) -> AdmissionLimits:
        return AdmissionLimits.model_validate({n: getattr(self, n) for n in ADMISSION_FIELDS})

    def api_key_set(self) -> frozenset[str]:
        """The keys /v1 accepts: ``api_keys`` and every tenant's in ``tenants_file``."""
        return self.tenants().keys

    def tenants(self) -> Tenants:
        """Who shares the gateway (``tenants``), read once."""
        if self._tenants is None:
            try:
                self._tenants = build_tenants(
                    _entries(self.api_keys), self.priority_key_set(), self.tenants_file
                )
            except TenantError as exc:
                raise SettingsError(f"tenants_file: {exc}") from None
        return self._tenants

    def priority_key_set(self) -> frozenset[str]:
        return _keys(self.priority_api_keys)

    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        return _networks(self.trusted_proxies)


def _entries(text: str) -> list[str]:
    """A list setting's entries: comma-separated or one a line (a key file, a Secret key
    written line by line), surrounding whitespace and blank entries dropped."""
    return [entry.strip() for entry in re.split(r"[,\r\n]", text) if entry.strip()]


def _keys(text: str) -> frozenset[str]:
    return frozenset(_entries(text))


def _networks(text: str) -> tuple[IPNetwork, ...]:
    """``trusted_proxies``: an address is a network of one (``127.0.0.6/32``)."""
    networks = []
    for entry in _entries(text):
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError as exc:
            raise ValueError(f"{entry!r} is no address or CIDR network: {exc}") from exc
    return tuple(networks)


def drop_secret_variables(environ: MutableMapping[str, str]) -> list[str]:
    """Removes ``SECRET_VARIABLES`` from ``environ`` (in any case, as the settings read
    them) and returns the names removed.

    NOTE: called on ``os.environ`` once the settings are read and before the engine is
    built: vLLM's engine core and workers and the grammar vetter are started by
    ``multiprocessing`` (fork or spawn), and both inherit this process's environment,
    as does anything they start in turn.
    """
    dropped = sorted(name for name in environ if name.upper() in SECRET_VARIABLES)
    for name in dropped:
        del environ[name]
    return dropped


def option_names(name: str) -> str:
    return f"--{name.replace('_', '-')} / DLFP_{name.upper()}"


def describe_error(exc: ValidationError) -> str:
    """One line naming the first bad setting, its option and variable."""
    if not exc.errors():
        return "invalid settings"
    first = first_error(exc.errors())
    if not first.loc:
        return f"invalid settings: {first.message}"
    name = first.loc[0]
    shown = "" if isinstance(first.input, dict) else f" = {first.input!r}"
    return f"invalid setting {name} ({option_names(name)}){shown}: {first.message}"
