"""What every ``bench tenants`` scenario shares: the options, the tenants under test, the
record of one request, the run a scenario drives and the outcome it returns.

A scenario is an async function from a ``Run`` to an ``Outcome``; ``bench.tenants.scenarios``
maps each scenario's name to its function.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.lib.text import TextGenerator

SCENARIO_NAMES = ("trickle", "weights", "token-rate")
CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class TenantKey:
    """A tenant of the gateway's tenants file, and one of its API keys."""

    name: str
    api_key: str


def parse_tenant(text: str) -> TenantKey:
    """``NAME=API_KEY``; ValueError otherwise."""
    name, sep, key = text.partition("=")
    if not sep or not name.strip() or not key.strip():
        raise ValueError(f"--tenant {text!r}: give NAME=API_KEY")
    return TenantKey(name.strip(), key.strip())


@dataclass(frozen=True)
class TenantsOptions:
    base_url: str
    tenants: tuple[TenantKey, ...]
    admin_token: str | None = None
    metrics_token: str | None = None
    model: str | None = None
    scenarios: tuple[str, ...] = SCENARIO_NAMES
    duration_s: float = 300.0
    """How long the load of ``trickle`` and ``weights`` runs."""
    streams: int | None = None
    """Concurrent streams of a flooding tenant; None: twice the slots it may hold."""
    max_tokens: int = 64
    """Tokens each flooding request asks for."""
    trickle_interval_s: float = 2.0
    trickle_max_tokens: int = 2
    trickle_wait_aim_s: float = 5.0
    weights: tuple[float, ...] = (3.0, 1.0)
    """``weights``: each tenant's weight, in ``--tenant`` order."""
    weight_tolerance: float = 0.10
    tokens_per_minute: int = 2000
    """``token-rate``: the limit set on the first tenant."""
    rate_max_tokens: int = 32
    max_rate_requests: int = 200
    """``token-rate`` gives up if this many requests pass without a 429."""
    request_timeout_s: float = 600.0
    progress_s: float = 10.0
    seed: int = 0


@dataclass
class TenantRecord:
    """One request of one tenant: what came back and when (seconds after the scenario's
    start; latencies from the send)."""

    tenant: str
    kind: str
    """``flood``, ``trickle``, ``probe`` or ``retry``."""
    max_tokens: int
    send_s: float
    status: int | None = None
    """None: no HTTP answer (``code`` names the exception), or still in flight."""
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    is_complete: bool = False
    """The stream ended with ``[DONE]`` and no error event."""
    code: str | None = None
    """``error.code`` of a refusal or error event; ``cut`` for a stream the bench closed
    at the end of the load; an exception's name."""
    message: str | None = None
    retry_after_s: float | None = None

    @property
    def outcome(self) -> str:
        """``ok``, ``refused`` (an HTTP error status), ``cut``, ``in_flight`` or ``error``."""
        if self.is_complete:
            return "ok"
        if self.code == "cut":
            return "cut"
        if self.status is not None and self.status >= 400:
            return "refused"
        if self.code is None:  # queued (no status yet) or streaming (200)
            return "in_flight"
        return "error"

    @property
    def refusal(self) -> str:
        """``429 tenant_tokens_per_minute``: the status and the reason, as counted."""
        return f"{self.status} {self.code or '-'}"


@dataclass
class Outcome:
    """One scenario's records, metric scrapes, per-tenant figures and aim."""

    scenario: str
    tenants: tuple[str, ...]
    """The tenants it loaded, in ``--tenant`` order."""
    aim: str = ""
    met: bool | None = None
    """None: not measured (the gateway does not export what the aim needs)."""
    verdict: str = ""
    """The aim's figures, one line."""
    figures: dict[str, Any] = field(default_factory=dict)
    records: list[TenantRecord] = field(default_factory=list)
    window_s: float = 0.0
    """From the first send to the end of the load."""
    before: str | None = None
    """``/metrics`` text before the load (None where unreadable)."""
    after: str | None = None
    reports: list[dict[str, Any]] = field(default_factory=list)
    """Each tenant's figures (``report.tenant_reports``)."""
    elapsed_s: float = 0.0
    error: str | None = None
    """Why the scenario could not run (a missing admin token, an unknown tenant)."""


@dataclass
class Run:
    """The gateway under test, and how a scenario reaches it."""

    client: httpx.AsyncClient
    model: str
    options: TenantsOptions
    rng: random.Random = field(default_factory=random.Random)
    records: list[TenantRecord] = field(default_factory=list)
    """Every request of the scenario running, as it is sent (progress reads them)."""
    start_s: float = field(default_factory=time.monotonic)

    def key(self, tenant: str) -> str:
        return next(t.api_key for t in self.options.tenants if t.name == tenant)

    def since_start(self) -> float:
        return time.monotonic() - self.start_s

    def prompt(self, num_words: int) -> str:
        """Seeded filler text of about ``num_words`` words, opened by a unique number so
        that no two prompts share a prefix."""
        text = TextGenerator(self.rng)
        words: list[str] = [f"Request {self.rng.getrandbits(48):x}."]
        while len(words) < num_words:
            words.extend(text.sentence().split())
        return " ".join(words[:num_words])

    def chat(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }


Scenario = Callable[[Run], Awaitable[Outcome]]
