"""One streaming request to an OpenAI-compatible endpoint, timed chunk by chunk."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from bench.lib.records import RequestRecord
from bench.lib.stream import accounting_error, apply_event, parse_data
from bench.lib.workload import RequestSpec

Endpoint = Literal["chat", "completions"]
PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def server_root(base_url: str) -> str:
    """``http://host:port`` from a base URL given with or without ``/v1``."""
    return base_url.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class ClientSettings:
    """How every request of a run is sent."""

    base_url: str
    model: str
    max_tokens: int
    endpoint: Endpoint = "chat"
    api_key: str | None = None
    request_timeout_s: float = 900.0
    return_token_ids: bool = True
    """Ask vLLM for ``token_ids`` in every chunk (exact per-chunk counts, output agreement)."""
    cache_salt: str | None = None
    """vLLM's ``cache_salt``: keeps one arm's prefix cache from serving another's prompts."""
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return server_root(self.base_url) + PATHS[self.endpoint]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def payload(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if self.return_token_ids:
            body["return_token_ids"] = True
        if self.cache_salt:
            body["cache_salt"] = self.cache_salt
        return body | self.extra_body

    def public(self) -> dict[str, Any]:
        """The settings as recorded in a trial header (no API key)."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "max_tokens": self.max_tokens,
            "endpoint": self.endpoint,
            "request_timeout_s": self.request_timeout_s,
            "return_token_ids": self.return_token_ids,
            "cache_salt": self.cache_salt,
            "extra_body": self.extra_body,
        }


def new_record(spec: RequestSpec, max_tokens: int) -> RequestRecord:
    return RequestRecord(
        index=spec.index,
        kind=spec.kind,
        is_warmup=spec.is_warmup,
        prompt=spec.prompt,
        prompt_sha256=spec.prompt_sha256,
        num_prompt_tokens_target=spec.num_prompt_tokens,
        max_tokens=max_tokens,
        scheduled_s=spec.scheduled_s,
    )


async def _read_stream(
    response: httpx.Response, record: RequestRecord, chat: bool, t0: float
) -> None:
    async for line in response.aiter_lines():
        now = time.perf_counter() - t0
        if not line.startswith("data:"):
            continue  # blank separators, comments (keep-alives), event names
        event = parse_data(line[len("data:") :].strip(), chat)
        if event is None:
            break
        apply_event(record, event, now)
        if record.status == "failed":
            break


async def send_request(
    client: httpx.AsyncClient, settings: ClientSettings, spec: RequestSpec, t0: float
) -> RequestRecord:
    """Send one request now; never raises for a failed request (the record says why)."""
    return await stream_into(client, settings, new_record(spec, settings.max_tokens), t0)


async def stream_into(
    client: httpx.AsyncClient, settings: ClientSettings, record: RequestRecord, t0: float
) -> RequestRecord:
    """Send ``record``'s prompt now and fill ``record`` as the chunks arrive (so a caller
    sees the first token while the stream runs); the exact token accounting at the end."""
    record.send_s = time.perf_counter() - t0
    try:
        async with client.stream(
            "POST",
            settings.url,
            json=settings.payload(record.prompt),
            headers=settings.headers(),
            timeout=settings.request_timeout_s,
        ) as response:
            record.http_status = response.status_code
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                record.fail(f"HTTP {response.status_code}: {body[:500]}")
            else:
                await _read_stream(response, record, settings.endpoint == "chat", t0)
    except httpx.HTTPError as exc:
        record.fail(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a malformed chunk fails this request, not the whole trial
        record.fail(f"bad stream: {type(exc).__name__}: {exc}")
    record.end_s = time.perf_counter() - t0
    if record.status != "failed":
        error = accounting_error(record, settings.max_tokens)
        if error is None:
            record.status = "ok"
        else:
            record.fail(error)
    return record
