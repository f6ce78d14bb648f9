"""``dlfp-gateway bench abuse``: bounded abuse scenarios against a gateway on loopback.

Each scenario sends a bounded number of hostile or oversized requests to a running
gateway and judges what came back: ``burst`` (many streams at once), ``surrogate-stop``
(a lone surrogate as a stop string, and the memory it costs), ``stalled-readers``
(streams nobody reads), ``reply-too-big``, ``deep-schema``, ``pre-admission`` (large
bodies before admission), and ``list-bodies``, ``idle-sockets``, ``space-free-prompts``
and ``distinct-schemas``, where one client tries to take the gateway from another
(``bench/abuse_hostile.py``), and ``cold-burst`` and ``slow-readers``, which test what
the SLO check knows (``bench/abuse_cold.py``). One table on stdout, ``--results FILE``
as JSON, progress on stderr; the status is 1 if any scenario failed. Only a loopback
gateway is accepted: these requests are meant to hurt the server they reach.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import socket
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.client import server_root
from bench.endpoint import EndpointError, bearer, wait_ready
from bench.scrape import parse_exposition
from bench.text import TextGenerator

SCENARIO_NAMES = (
    "burst",
    "surrogate-stop",
    "stalled-readers",
    "reply-too-big",
    "deep-schema",
    "pre-admission",
    "list-bodies",
    "idle-sockets",
    "space-free-prompts",
    "distinct-schemas",
    "cold-burst",
    "slow-readers",
)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
CHAT = "/v1/chat/completions"
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class AbuseOptions:
    base_url: str
    model: str | None = None
    api_key: str | None = None
    admin_token: str | None = None
    scenarios: tuple[str, ...] = SCENARIO_NAMES
    num_burst: int = 300
    num_surrogate: int = 300
    num_stalled: int = 2
    num_pre_admission: int = 200
    num_list_bodies: int = 12
    num_idle_sockets: int = 300
    num_space_free: int = 200
    num_schemas: int = 170
    num_cold_burst: int = 200
    num_slow: int = 6
    slow_hold_s: float = 20.0
    """How long slow-readers' streams go unread."""
    ttft_slo_ms: float = 30_000.0
    """Used when ``GET /admin/dlfp`` does not give the gateway's own."""
    stream_write_timeout_s: float = 30.0
    max_rss_growth_mb: float = 8.0
    request_timeout_s: float = 120.0
    scenario_timeout_s: float = 600.0
    seed: int = 0


@dataclass
class Outcome:
    """One scenario's figures and verdict: it passed if no criterion failed."""

    scenario: str
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    """Raw per-request records, for the JSON only."""
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def check(self, ok: bool | None, criterion: str) -> None:
        """``criterion`` with its figure, e.g. "P95 refusal 0.2 s <= 1 s"; None = unmeasured."""
        if ok is None:
            self.not_measured.append(criterion)
        elif not ok:
            self.failures.append(criterion)


@dataclass(frozen=True)
class Reply:
    """What one plain (non-streamed) request got back."""

    status: int | None
    """None: no HTTP answer (connection error or time-out; ``code`` names it)."""
    latency_s: float
    code: str | None = None
    param: str | None = None
    retry_after: str | None = None

    @property
    def label(self) -> str:
        return str(self.status) if self.status is not None else "no answer"


@dataclass
class Target:
    """The gateway under test, and how to reach it."""

    client: httpx.AsyncClient
    model: str
    options: AbuseOptions
    rng: random.Random = field(default_factory=random.Random)

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.options.base_url)
        return parts.hostname or "127.0.0.1", parts.port or 80

    def chat(self, prompt: str, **fields: Any) -> dict[str, Any]:
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}], **fields}

    def words(self, num_words: int) -> str:
        """Seeded filler text of ``num_words`` words."""
        text = TextGenerator(self.rng)
        words: list[str] = []
        while len(words) < num_words:
            words.extend(text.sentence().split())
        return " ".join(words[:num_words])

    async def send(self, path: str, body: dict[str, Any] | bytes) -> Reply:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        start = time.monotonic()
        try:
            response = await self.client.post(path, content=content, headers=JSON_HEADERS)
        except httpx.HTTPError as exc:
            return Reply(None, time.monotonic() - start, code=type(exc).__name__)
        error = error_of(response.content)
        return Reply(
            response.status_code,
            time.monotonic() - start,
            code=error.get("code"),
            param=error.get("param"),
            retry_after=response.headers.get("retry-after"),
        )

    async def metrics(self, *names: str) -> dict[str, float]:
        """The named series of ``/metrics`` (summed over labels); absent ones are missing."""
        try:
            response = await self.client.get("/metrics", timeout=30.0)
        except httpx.HTTPError:
            return {}
        return parse_exposition(response.text, names) if response.status_code == 200 else {}

    async def admin(self, path: str) -> dict[str, Any] | None:
        """``GET /admin/...`` with the admin token; None if it is not answered with 200."""
        try:
            response = await self.client.get(path, headers=bearer(self.options.admin_token))
            body = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return body if isinstance(body, dict) else None


async def open_unread(target: Target, body: bytes, path: str = CHAT) -> socket.socket:
    """A raw streaming request with a small receive window, whose reply nobody reads."""
    host, port = target.address
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, port))
    auth = f"Authorization: Bearer {target.options.api_key}\r\n" if target.options.api_key else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    await loop.sock_sendall(sock, head.encode() + body)
    return sock


async def status_line(sock: socket.socket) -> str:
    """The status of the reply's first line, read only now (``?`` if none came)."""
    with contextlib.suppress(OSError, TimeoutError):
        first = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 64), 2.0)
        parts = first.split(b" ", 2)
        return parts[1].decode(errors="replace") if len(parts) > 1 else "?"
    return "?"


def error_of(content: bytes) -> dict[str, Any]:
    """The OpenAI error object of a body, or {} for any other body."""
    try:
        error = json.loads(content).get("error")
    except (ValueError, AttributeError):
        return {}
    return error if isinstance(error, dict) else {}


def counts_by(values: Sequence[object]) -> dict[str, int]:
    """How many of each value, keyed by its text."""
    return {str(k): n for k, n in sorted(Counter(values).items(), key=lambda kv: str(kv[0]))}


def check_loopback(base_url: str) -> str:
    """The server root of ``base_url``; ValueError unless it is ``http://`` on a loopback
    host (the stalled readers are plain TCP sockets)."""
    parts = urlsplit(base_url)
    if parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"{base_url}: only a loopback gateway is accepted ({parts.hostname!r})")
    if parts.scheme != "http":
        raise ValueError(f"{base_url}: give the gateway as http://HOST:PORT")
    return server_root(base_url)


Scenario = Callable[[Target], Awaitable[Outcome]]


async def run_scenario(name: str, scenario: Scenario, target: Target) -> Outcome:
    print(f"abuse: {name}: start", file=sys.stderr, flush=True)
    start = time.monotonic()
    timeout_s = target.options.scenario_timeout_s
    try:
        outcome = await asyncio.wait_for(scenario(target), timeout_s)
    except TimeoutError:
        outcome = Outcome(name, failures=[f"did not finish within {timeout_s:g} s"])
    except (httpx.HTTPError, OSError) as exc:
        outcome = Outcome(name, failures=[f"{type(exc).__name__}: {exc}"])
    outcome.elapsed_s = time.monotonic() - start
    verdict = "PASS" if outcome.passed else "FAIL"
    print(f"abuse: {name}: {verdict} in {outcome.elapsed_s:.1f} s", file=sys.stderr, flush=True)
    return outcome


async def run_abuse(options: AbuseOptions) -> list[Outcome]:
    """Every scenario of ``options.scenarios``, one after the other."""
    # NOTE: imported here, as the scenarios import this module's Target and Outcome.
    from bench.abuse_scenarios import SCENARIOS

    root = check_loopback(options.base_url)
    unknown = [name for name in options.scenarios if name not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=root,
        timeout=options.request_timeout_s,
        limits=limits,
        headers=bearer(options.api_key),
    ) as client:
        model = options.model or (await wait_ready(client, root, options.api_key, 30.0) or [""])[0]
        if not model:
            raise EndpointError(f"{root}/v1/models lists no model; pass --model")
        target = Target(client, model, replace(options, base_url=root))
        outcomes = []
        for name in options.scenarios:
            target.rng = random.Random(f"{options.seed}-{name}")
            outcomes.append(await run_scenario(name, SCENARIOS[name], target))
    return outcomes


def _figure(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, dict):
        return " ".join(f"{k}:{_figure(v)}" for k, v in value.items()) or "-"
    return "-" if value is None else str(value)


def format_table(outcomes: list[Outcome], width: int = 100) -> str:
    """One row per scenario: its name, PASS or FAIL, and its figures wrapped below."""
    lines = [f"{'scenario':<16} {'result':<6} figures", f"{'-' * 16} {'-' * 6} {'-' * 40}"]
    for outcome in outcomes:
        items = [f"{k}={_figure(v)}" for k, v in outcome.figures.items()]
        items += [f"FAILED: {c}" for c in outcome.failures]
        items += [f"not measured: {c}" for c in outcome.not_measured]
        rows: list[str] = []
        for item in items or ["-"]:
            if rows and len(rows[-1]) + 2 + len(item) <= width - 24 and ": " not in item:
                rows[-1] += f"  {item}"
            else:
                rows.append(item)
        verdict = "PASS" if outcome.passed else "FAIL"
        lines.append(f"{outcome.scenario:<16} {verdict:<6} {rows[0]}")
        lines.extend(f"{'':<23} {row}" for row in rows[1:])
    return "\n".join(lines)


def outcomes_json(options: AbuseOptions, outcomes: list[Outcome]) -> dict[str, Any]:
    return {
        "base_url": options.base_url,
        "passed": all(o.passed for o in outcomes),
        "scenarios": [asdict(o) | {"passed": o.passed} for o in outcomes],
    }


def options_from(args: argparse.Namespace) -> AbuseOptions:
    names = tuple(n.strip() for n in args.scenarios.split(",") if n.strip())
    fields = {k: getattr(args, k) for k in AbuseOptions.__dataclass_fields__ if hasattr(args, k)}
    return AbuseOptions(**(fields | {"scenarios": names or SCENARIO_NAMES}))


def main(args: argparse.Namespace) -> int:
    if not args.base_url:
        print("bench abuse: --base-url is required", file=sys.stderr)
        return 2
    options = options_from(args)
    try:
        outcomes = asyncio.run(run_abuse(options))
    except (EndpointError, ValueError) as exc:
        print(f"bench abuse: {exc}", file=sys.stderr)
        return 2
    print(format_table(outcomes))
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(outcomes_json(options, outcomes), indent=2) + "\n"
        args.results.write_text(text, encoding="utf-8")
        print(f"results: {args.results}")
    return 0 if all(o.passed for o in outcomes) else 1


def add_parser(sub: Any) -> None:
    defaults = AbuseOptions(base_url="")
    p = sub.add_parser(
        "abuse",
        help="bounded abuse scenarios against a gateway on loopback",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", help="gateway root on loopback, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer key for /v1/* [env OPENAI_API_KEY]",
    )
    p.add_argument("--admin-token", help="the gateway's /admin/* bearer token (optional)")
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIO_NAMES),
        help=f"comma-separated, in this order by default: {','.join(SCENARIO_NAMES)}",
    )
    for name, what in (
        ("num_burst", "streams sent at once by burst"),
        ("num_surrogate", "requests of surrogate-stop (and as many baseline ones)"),
        ("num_stalled", "clients of stalled-readers that never read"),
        ("num_pre_admission", "large-prompt requests of pre-admission"),
        ("num_list_bodies", "1 MiB list-shaped bodies of list-bodies"),
        ("num_idle_sockets", "connections of idle-sockets that send nothing"),
        ("num_space_free", "400 KB prompts without a space of space-free-prompts"),
        ("num_schemas", "requests with distinct JSON schemas of distinct-schemas"),
        ("num_cold_burst", "streams sent at once by cold-burst, to a fresh gateway"),
        ("num_slow", "Responses streams of slow-readers that nobody reads"),
    ):
        default = getattr(defaults, name)
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=default, help=what)
    for name, what in (
        ("ttft_slo_ms", "TTFT SLO of burst when GET /admin/dlfp does not give the gateway's"),
        ("stream_write_timeout_s", "the gateway's stream_write_timeout_s"),
        ("slow_hold_s", "seconds slow-readers' streams go unread"),
        ("max_rss_growth_mb", "most RSS surrogate-stop may add beyond its baseline batch"),
        ("request_timeout_s", "time-out of one request"),
        ("scenario_timeout_s", "time-out of one scenario"),
    ):
        default = getattr(defaults, name)
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=default, help=what)
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed of the filler text")
    p.add_argument("--results", type=Path, help="write the outcomes (and raw records) as JSON")
    p.set_defaults(handler=main)
