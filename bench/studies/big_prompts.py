"""Do big request bodies stall the streams already running?

Two phases against one running gateway, each with ``--streams`` chat streams of
``--max-tokens`` tokens (``ignore_eos``):

- ``baseline``: the streams alone;
- ``big``: the same streams, and once every stream has its first token, ``--big``
  prompts just under ``--body-bytes`` (``DLFP_MAX_BODY_BYTES``) sent at once.

It reports the inter-token latency of the running streams inside the window the
big prompts were in flight (the same offsets in the baseline), P50 and P99, and
the ratio of the P99s (aim: at most 1.10). Raw gaps and replies go to ``--out``.
Fixed seed, one warm-up request, one summary table.

    python -m bench.studies.big_prompts --base-url http://127.0.0.1:8000 --out big.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.lib.stats import percentile

WORDS = ["the", "train", "left", "the", "station", "late", "and", "rain", "fell", "on", "fields"]
# Room for the JSON envelope around the prompt text.
ENVELOPE_BYTES = 512


@dataclass
class Options:
    base_url: str = "http://127.0.0.1:8000"
    model: str | None = None
    streams: int = 4
    max_tokens: int = 256
    big: int = 20
    body_bytes: int = 1_048_576
    seed: int = 14
    api_key: str | None = None
    timeout_s: float = 600.0


@dataclass
class Phase:
    name: str
    start_s: float = 0.0
    window: tuple[float, float] = (0.0, 0.0)
    """Seconds after the phase start in which gaps count."""
    token_times: list[list[float]] = field(default_factory=list)
    big_statuses: list[int] = field(default_factory=list)
    big_codes: list[str | None] = field(default_factory=list)

    def gaps_ms(self) -> list[float]:
        low, high = self.window
        gaps = []
        for times in self.token_times:
            for earlier, later in itertools.pairwise(times):
                if low <= later - self.start_s <= high:
                    gaps.append((later - earlier) * 1000)
        return gaps


def filler(num_bytes: int, seed: int) -> str:
    rng = random.Random(seed)
    parts, size = [], 0
    while size < num_bytes:
        word = rng.choice(WORDS)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:num_bytes]


def _chat(model: str, content: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }


async def _stream(
    client: httpx.AsyncClient, body: dict[str, Any], times: list[float], first: asyncio.Event
) -> None:
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                times.append(time.perf_counter())
                first.set()


async def _big(client: httpx.AsyncClient, body: dict[str, Any], phase: Phase) -> None:
    r = await client.post("/v1/chat/completions", json=body)
    phase.big_statuses.append(r.status_code)
    error = r.json().get("error") if r.status_code != 200 else None
    phase.big_codes.append(error.get("code") if isinstance(error, dict) else None)


async def run_phase(
    client: httpx.AsyncClient, opts: Options, model: str, name: str, window: tuple[float, float]
) -> Phase:
    """Runs the streams; in the ``big`` phase also the big prompts, whose flight
    sets the window (the baseline reuses it)."""
    phase = Phase(name, start_s=time.perf_counter(), window=window)
    firsts = [asyncio.Event() for _ in range(opts.streams)]
    phase.token_times = [[] for _ in range(opts.streams)]
    streams = [
        asyncio.create_task(
            _stream(
                client,
                _chat(model, f"Story {i}: {WORDS[i % len(WORDS)]}", opts.max_tokens, True),
                phase.token_times[i],
                firsts[i],
            )
        )
        for i in range(opts.streams)
    ]
    await asyncio.gather(*(f.wait() for f in firsts))
    if name == "big":
        content = filler(opts.body_bytes - ENVELOPE_BYTES, opts.seed)
        big_start = time.perf_counter() - phase.start_s
        await asyncio.gather(
            *(_big(client, _chat(model, content, 1, False), phase) for _ in range(opts.big))
        )
        phase.window = (big_start, time.perf_counter() - phase.start_s + 0.5)
    await asyncio.gather(*streams)
    return phase


def summary(phases: list[Phase]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for phase in phases:
        gaps = phase.gaps_ms()
        rows[phase.name] = {
            "gaps": len(gaps),
            "itl_p50_ms": percentile(gaps, 50),
            "itl_p99_ms": percentile(gaps, 99),
            "window_s": [round(x, 3) for x in phase.window],
        }
    base, big = rows.get("baseline", {}).get("itl_p99_ms"), rows.get("big", {}).get("itl_p99_ms")
    rows["p99_ratio"] = big / base if base and big is not None else None
    return rows


async def run(client: httpx.AsyncClient, opts: Options) -> dict[str, Any]:
    model = opts.model or (await client.get("/v1/models")).json()["data"][0]["id"]
    warm = await client.post("/v1/chat/completions", json=_chat(model, "Hello.", 4, False))
    warm.raise_for_status()
    big = await run_phase(client, opts, model, "big", (0.0, 0.0))
    baseline = await run_phase(client, opts, model, "baseline", big.window)
    return {
        "options": asdict(opts),
        "summary": summary([baseline, big]),
        "big_replies": {"statuses": big.big_statuses, "codes": big.big_codes},
        "raw": {
            p.name: {"start_s": p.start_s, "token_times": p.token_times} for p in (baseline, big)
        },
    }


def print_table(result: dict[str, Any]) -> None:
    s = result["summary"]
    print(f"{'phase':<10} {'gaps':>6} {'ITL P50 ms':>11} {'ITL P99 ms':>11}")
    for name in ("baseline", "big"):
        row = s[name]
        p50, p99 = row["itl_p50_ms"], row["itl_p99_ms"]
        print(f"{name:<10} {row['gaps']:>6} {p50 or 0:>11.1f} {p99 or 0:>11.1f}")
    ratio = s["p99_ratio"]
    print(f"P99 ratio big/baseline: {ratio:.3f} (aim <= 1.10)" if ratio else "P99 ratio: n/a")
    print(f"big prompt replies: {sorted(set(result['big_replies']['statuses']))}")


def parse_args(argv: list[str] | None = None) -> tuple[Options, Path | None]:
    p = argparse.ArgumentParser(prog="python -m bench.studies.big_prompts", description=__doc__)
    defaults = Options()
    p.add_argument("--base-url", default=defaults.base_url)
    p.add_argument("--model", default=None)
    p.add_argument("--streams", type=int, default=defaults.streams)
    p.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    p.add_argument("--big", type=int, default=defaults.big)
    p.add_argument("--body-bytes", type=int, default=defaults.body_bytes)
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--api-key", default=None)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    opts = Options(
        a.base_url, a.model, a.streams, a.max_tokens, a.big, a.body_bytes, a.seed, a.api_key
    )
    return opts, a.out


async def _main(opts: Options, out: Path | None) -> None:
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    async with httpx.AsyncClient(
        base_url=opts.base_url, timeout=opts.timeout_s, headers=headers
    ) as client:
        result = await run(client, opts)
    print_table(result)
    if out is not None:
        out.write_text(json.dumps(result, indent=1))


def main(argv: list[str] | None = None) -> int:
    opts, out = parse_args(argv)
    asyncio.run(_main(opts, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
