"""Helpers for the real-engine tier: prompts, streaming calls, admin calls, metrics."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ADMIN_TOKEN, TINY_MODEL_NAME, Server
from tests.http_helpers import sse_data, sse_json
from tests.tiny_model import CORPUS

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SENTENCES = [s.strip() + "." for s in CORPUS.replace("\n", " ").split(".") if s.strip()]


def long_prompt(seed: int, num_chars: int) -> str:
    """Distinct natural-language text (no prefix shared with another seed)."""
    rng = random.Random(seed)
    parts = [f"Report {seed}: {rng.choice(SENTENCES)}"]
    while sum(len(p) for p in parts) < num_chars:
        parts.append(rng.choice(SENTENCES))
    return " ".join(parts)


def chat_body(content: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": TINY_MODEL_NAME,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        **extra,
    }


def stream_chat(
    server: Server,
    content: str,
    max_tokens: int,
    on_first_token: Callable[[], None] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One streamed chat completion; returns status, text, token count and Retry-After."""
    body = chat_body(
        content, max_tokens, stream=True, stream_options={"include_usage": True}, **extra
    )
    lines: list[str] = []
    with (
        httpx.Client(base_url=server.base_url, timeout=600) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            lines.append(line)
            if on_first_token is not None and '"content":"' in line and '"role"' not in line:
                on_first_token()
                on_first_token = None
        status, retry_after = r.status_code, r.headers.get("retry-after")
    text = "\n".join(lines)
    result: dict[str, Any] = {"status": status, "retry_after": retry_after}
    if status != 200:
        result["error"] = json.loads(text).get("error")
        return result
    chunks = sse_json(text)
    result["done"] = sse_data(text)[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")]
    result["text"] = "".join(deltas)
    usage = [c["usage"] for c in chunks if c.get("usage")]
    result["completion_tokens"] = usage[-1]["completion_tokens"] if usage else None
    return result


def admin(server: Server, method: str, path: str = "/admin/dlfp", **kwargs: Any) -> httpx.Response:
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        return client.request(method, path, headers=ADMIN, **kwargs)


def steps_since(server: Server, since: int) -> list[dict[str, Any]]:
    """``/admin/dlfp/steps`` from step ``since`` on, oldest first."""
    r = admin(server, "GET", path="/admin/dlfp/steps", params={"since": since})
    assert r.status_code == 200, r.text
    steps: list[dict[str, Any]] = r.json()["steps"]
    return sorted(steps, key=lambda s: int(s["step_index"]))


def metrics(server: Server) -> dict[str, float]:
    """Every sample of /metrics as ``name{labels}`` -> value."""
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()) if True)
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def metric_sum(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))
