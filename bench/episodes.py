"""``dlfp-gateway bench episodes``: interference episodes, every arm on one gateway, paired.

Every arm runs on the same gateway, switched at runtime (``PATCH /admin/dlfp`` with
the arm's settings over the gateway's start-up settings, then ``POST
/admin/dlfp/reset``), and replays the same episodes: the machine's own drift
then falls on every arm alike, and arms are compared seconds apart, paired by
episode, in an order rotated per episode. The episode itself is described in
``bench/episode_run.py`` and its figures in ``bench/episode_stats.py``.

At the start the run sizes the long prompts to about ``--long-prefill-s`` of lone
prefill on this machine (``sizing.json``, reused on resume). Every arm's run of
every episode is one file, ``records/episode-<e>/<arm>.json.gz``, written as it
ends; a rerun skips what is recorded. ``--conditions`` runs the four conditions
of the baseline (``itl_slo_ms`` at the gateway's setting and at min(3 x the lone
decode step, 0.6 x it), each with 2 and 8 decoding streams), one folder each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from bench.calibrate import PROBE_TOKENS, write_host
from bench.client import ClientSettings, new_record, stream_into
from bench.endpoint import (
    EndpointError,
    apply_admin_patch,
    get_settings,
    reset_controller,
    wait_drained,
    wait_ready,
)
from bench.episode_run import EpisodeRecord, EpisodeShape, episode_prompts, run_episode
from bench.episode_stats import SENTINEL, format_episodes_markdown, summarize_episodes
from bench.loadgen import Arm
from bench.records import open_text
from bench.stats import request_gaps
from bench.tokens import TokenCounter, load_counter
from bench.workload import RequestSpec, make_prompt

DEFAULT_RESULTS = Path("bench/results/episodes")
EPISODE_SEED_BASE = 5000
"""Episode e replays the prompts of seed ``EPISODE_SEED_BASE + e``."""
LEN_MARGIN = 64
"""Long prompts are capped at ``max_model_len`` minus this."""
CAP_SHARE = 0.9
"""The cap, in counted tokens, keeps this share of the limit: the server's tokens per
counted token vary from prompt to prompt (much more with ``--tokenizer`` unset)."""
SIZING_ROUNDS = 2
"""Probes at the chosen length, each correcting it toward the prefill time asked for."""
DECODE_PROBE_TOKENS = 64


@dataclass(frozen=True)
class EpisodeRun:
    results_dir: Path
    client: ClientSettings
    shape: EpisodeShape
    arms: tuple[Arm, ...]
    num_episodes: int
    itl_slo_ms: float
    admin_token: str | None = None
    ready_timeout_s: float = 600.0


def default_arm_names(settings: dict[str, Any]) -> list[str]:
    """``off``, ``fixed`` at 8, 16, 32, ... up to ``max_cap_tokens``, ``dlfp``, ``dlfp-ct``
    and the sentinel, a second ``dlfp-ct``."""
    low, high = int(settings["min_cap_tokens"]), int(settings["max_cap_tokens"])
    step = int(settings["step_tokens"])
    caps = [c for c in (8 * 2**k for k in range(20)) if low <= c <= high and c % step == 0]
    return ["off", *(f"fixed-{c}" for c in caps), "dlfp", "dlfp-ct", SENTINEL]


def arm_patch(name: str, itl_slo_ms: float | None) -> dict[str, Any]:
    """The ``PATCH /admin/dlfp`` body that selects the arm ``name``."""
    extra: dict[str, Any] = {} if itl_slo_ms is None else {"itl_slo_ms": itl_slo_ms}
    if name.startswith("fixed-"):
        return {"controller": "fixed", "fixed_cap_tokens": int(name[6:])} | extra
    if name == SENTINEL:
        return {"controller": "dlfp-ct"} | extra
    if name in ("off", "dlfp", "dlfp-ct"):
        return {"controller": name} | extra
    raise ValueError(f"unknown arm {name!r}: off, fixed-<tokens>, dlfp, dlfp-ct or {SENTINEL}")


def rotated(items: tuple[Arm, ...], by: int) -> tuple[Arm, ...]:
    shift = by % len(items)
    return items[shift:] + items[:shift]


def record_path(results_dir: Path, episode: int, arm: str) -> Path:
    return results_dir / "records" / f"episode-{episode}" / f"{arm}.json.gz"


def write_record(path: Path, record: EpisodeRecord) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial.gz")  # gzip, and never globbed
    with open_text(partial, "w") as f:
        json.dump(record.to_json(), f)
    partial.replace(path)


def read_records(results_dir: Path) -> dict[str, dict[int, EpisodeRecord]]:
    """Every recorded run, by arm and then episode."""
    found: dict[str, dict[int, EpisodeRecord]] = {}
    for path in sorted((results_dir / "records").glob("episode-*/*.json.gz")):
        with open_text(path) as f:
            record = EpisodeRecord.from_json(json.load(f))
        found.setdefault(record.arm, {})[record.episode] = record
    return found


def _check_plan(path: Path, plan: dict[str, Any]) -> None:
    """A resumed run must send what the recorded one sent."""
    plan = json.loads(json.dumps(plan))  # as the file holds it: lists, not tuples
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        differing = sorted(k for k in plan if k != "arms" and saved.get(k) != plan[k])
        if differing:
            raise ValueError(
                f"{path} records another episode plan ({', '.join(differing)} differ): "
                "use another --results folder"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")


async def _prefill_probe(
    http: httpx.AsyncClient, client: ClientSettings, counter: TokenCounter, index: int, length: int
) -> dict[str, Any]:
    """One lone long prompt of ``length`` counted tokens: its server tokens and TTFT."""
    prompt, counted = make_prompt(4900, index, "long", length, length + 16, counter)
    spec = RequestSpec(index, "long", False, 0.0, prompt, counted)
    one = replace(client, max_tokens=1)
    record = await stream_into(http, one, new_record(spec, 1), time.perf_counter())
    if not record.is_ok or not record.chunk_s or record.send_s is None:
        raise EndpointError(f"the sizing probe failed: {record.error}")
    probe = {
        "tokens": counted,
        "server_tokens": record.num_prompt_tokens or counted,
        "ttft_s": record.chunk_s[0] - record.send_s,
    }
    print(
        f"[episodes] sizing probe {index}: {probe['server_tokens']} tokens, "
        f"TTFT {probe['ttft_s']:.2f} s",
        file=sys.stderr,
    )
    return probe


async def size_long_prompts(
    http: httpx.AsyncClient,
    client: ClientSettings,
    counter: TokenCounter,
    prefill_s: float,
    max_model_len: int,
    results_dir: Path,
) -> int:
    """The long prompts' length (by ``counter``) for about ``prefill_s`` of lone prefill,
    within ``max_model_len - LEN_MARGIN`` server tokens; measured once (``sizing.json``).

    A warm-up probe, one at ``PROBE_TOKENS`` for a first guess (prefill speed, and the
    server's tokens per counted token), then ``SIZING_ROUNDS`` at the guess, each
    correcting it (prefill is not linear in the length)."""
    path = results_dir / "sizing.json"
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        print(f"[episodes] long prompts: {saved['long_tokens']} tokens ({path})", file=sys.stderr)
        return int(saved["long_tokens"])
    probe_client = replace(client, cache_salt=f"dlfp-sizing-{uuid.uuid4().hex[:12]}")
    limit = max_model_len - LEN_MARGIN
    probes = [await _prefill_probe(http, probe_client, counter, 0, min(PROBE_TOKENS, limit // 4))]
    length = int(probes[0]["tokens"])
    for index in range(1, SIZING_ROUNDS + 2):
        probe = await _prefill_probe(http, probe_client, counter, index, length)
        probes.append(probe)
        per_counted = probe["server_tokens"] / probe["tokens"]
        scale = min(prefill_s / probe["ttft_s"], limit / probe["server_tokens"])
        cap = math.floor(CAP_SHARE * limit / per_counted)
        length = max(1, min(math.floor(length * scale), cap))
    saved = {
        "prefill_s": prefill_s,
        "probes": probes,
        "max_model_len": max_model_len,
        "long_tokens": length,
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    print(f"[episodes] long prompts: {length} tokens", file=sys.stderr)
    return length


def _progress(done: int, total: int, t0: float, record: EpisodeRecord, summary: str) -> None:
    print(
        f"[episodes] {done}/{total} elapsed {time.perf_counter() - t0:.0f}s | episode "
        f"{record.episode} #{record.position + 1} {record.arm}: {summary}",
        file=sys.stderr,
        flush=True,
    )


def _brief(record: EpisodeRecord, itl_slo_ms: float) -> str:
    from bench.episode_stats import episode_figures

    if record.error is not None:
        return f"FAILED: {record.error[:160]}"
    f = episode_figures(record, itl_slo_ms)

    def ms(key: str) -> str:
        return "-" if f[key] is None else f"{f[key]:.0f}"

    return (
        f"window {f['window_s']:.1f}s, gap P99/max {ms('window_p99_gap_ms')}/"
        f"{ms('window_max_gap_ms')} ms, TTFT short/long {ms('ttft_short_mean_ms')}/"
        f"{ms('ttft_long_mean_ms')} ms, lone decode {ms('lone_decode_step_ms')} ms"
    )


async def run_episodes(run: EpisodeRun, baseline: dict[str, Any], counter: TokenCounter) -> int:
    """Every (episode, arm) not yet recorded; returns how many ran."""
    plan = {
        "shape": asdict(run.shape),
        "num_episodes": run.num_episodes,
        "itl_slo_ms": run.itl_slo_ms,
        "episode_seed_base": EPISODE_SEED_BASE,
        "arms": {a.name: a.admin_patch for a in run.arms},
        "client": run.client.public() | {"cache_salt": None},
    }
    _check_plan(run.results_dir / "episodes.json", plan)
    total = run.num_episodes * len(run.arms)
    done = ran = 0
    t0 = time.perf_counter()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=run.client.request_timeout_s) as http:
        try:
            for episode in range(run.num_episodes):
                prompts = episode_prompts(run.shape, EPISODE_SEED_BASE + episode, counter)
                for position, arm in enumerate(rotated(run.arms, episode)):
                    done += 1
                    path = record_path(run.results_dir, episode, arm.name)
                    if path.exists():
                        continue
                    record = await _run_one(http, run, baseline, arm, episode, position, prompts)
                    write_record(path, record)
                    ran += 1
                    _progress(done, total, t0, record, _brief(record, run.itl_slo_ms))
        finally:
            # Leave the gateway as it was found.
            await apply_admin_patch(http, run.client.base_url, baseline, run.admin_token)
            await reset_controller(http, run.client.base_url, run.admin_token)
    return ran


async def _run_one(
    http: httpx.AsyncClient,
    run: EpisodeRun,
    baseline: dict[str, Any],
    arm: Arm,
    episode: int,
    position: int,
    prompts: list[Any],
) -> EpisodeRecord:
    base_url = run.client.base_url
    await wait_ready(http, base_url, run.client.api_key, run.ready_timeout_s)
    await wait_drained(http, base_url)
    patch = baseline | (arm.admin_patch or {})
    await apply_admin_patch(http, base_url, patch, run.admin_token)
    # NOTE: a PATCH that keeps the mode keeps the learned cap and cost model: reset, so
    # that every arm's run starts from the same controller state.
    reset = await reset_controller(http, base_url, run.admin_token)
    record = EpisodeRecord(
        episode=episode,
        arm=arm.name,
        position=position,
        nonce=uuid.uuid4().hex[:12],
        admin_patch=arm.admin_patch,
        reset_response=reset.get("state") if isinstance(reset.get("state"), dict) else None,
        started_unix_s=time.time(),
    )
    return await run_episode(http, run.client, run.shape, prompts, record)


async def lone_decode_probe_ms(http: httpx.AsyncClient, client: ClientSettings) -> float:
    """Median gap of one stream decoding alone (``DECODE_PROBE_TOKENS`` tokens)."""
    spec = RequestSpec(0, "short", False, 0.0, f"[probe {uuid.uuid4().hex[:12]}] Count on.", 0)
    probe = replace(client, max_tokens=DECODE_PROBE_TOKENS)
    record = await stream_into(
        http, probe, new_record(spec, DECODE_PROBE_TOKENS), time.perf_counter()
    )
    gaps = [g for g in request_gaps(record) if g > 0]
    if not record.is_ok or not gaps:
        raise EndpointError(f"the lone-decode probe failed: {record.error}")
    return 1000 * statistics.median(gaps)


def conditions(default_slo_ms: float, decode_step_ms: float) -> dict[str, dict[str, Any]]:
    """The baseline's four conditions: two objectives, each with 2 and 8 decoding streams."""
    tight = round(min(3 * decode_step_ms, 0.6 * default_slo_ms) / 10) * 10
    out = {}
    for slo in (default_slo_ms, float(tight)):
        for decoders in (2, 8):
            out[f"slo{slo:g}-d{decoders}"] = {"itl_slo_ms": slo, "num_decoders": decoders}
    return out


async def _prepare(args: argparse.Namespace, counter: TokenCounter) -> dict[str, Any]:
    """Readiness, host, baseline settings, long-prompt size and (with --conditions) the
    conditions, each measured once and saved in the results folder."""
    results: Path = args.results
    async with httpx.AsyncClient(timeout=args.request_timeout_s) as http:
        models = await wait_ready(http, args.base_url, args.api_key, args.ready_timeout_s)
        model = args.model or (models[0] if models else None)
        if model is None:
            raise ValueError(f"{args.base_url}/v1/models lists no model; pass --model")
        response = await http.get(args.base_url.rstrip("/").removesuffix("/v1") + "/v1/models")
        entries = response.json().get("data", [])
        max_len = next((int(m["max_model_len"]) for m in entries if m.get("max_model_len")), 4096)
        await write_host(http, args.base_url, args.admin_token, results)
        baseline_path = results / "baseline-settings.json"
        if baseline_path.exists():
            baseline = json.loads(baseline_path.read_text(encoding="utf-8"))
        else:
            baseline = await get_settings(http, args.base_url, args.admin_token)
            if baseline is None:
                raise EndpointError("GET /admin/dlfp gave no settings: is this the gateway?")
            baseline_path.write_text(json.dumps(baseline, indent=2) + "\n", encoding="utf-8")
        client = ClientSettings(
            base_url=args.base_url,
            model=model,
            max_tokens=args.max_tokens,
            api_key=args.api_key,
            request_timeout_s=args.request_timeout_s,
        )
        long_tokens = await size_long_prompts(
            http, client, counter, args.long_prefill_s, max_len, results
        )
        prepared: dict[str, Any] = {
            "client": client,
            "baseline": baseline,
            "long_tokens": long_tokens,
            "decoder_max_tokens": max(64, max_len - 128),
        }
        if args.conditions:
            path = results / "conditions.json"
            if path.exists():
                prepared["conditions"] = json.loads(path.read_text(encoding="utf-8"))
            else:
                step = await lone_decode_probe_ms(http, client)
                found = conditions(float(baseline["itl_slo_ms"]), step)
                prepared["conditions"] = {"lone_decode_step_ms": step, "conditions": found}
                path.write_text(json.dumps(prepared["conditions"], indent=2) + "\n", "utf-8")
    return prepared


def _runs(args: argparse.Namespace, prepared: dict[str, Any]) -> list[EpisodeRun]:
    baseline = prepared["baseline"]
    shape = EpisodeShape(
        num_decoders=args.decoders,
        arrival_kinds=tuple(args.kinds.split(",")),
        offsets_s=tuple(float(x) for x in args.offsets.split(",")),
        long_tokens=prepared["long_tokens"],
        arrival_max_tokens=args.max_tokens,
        decoder_max_tokens=prepared["decoder_max_tokens"],
        lead_s=args.lead_s,
        tail_s=args.tail_s,
    )
    names = args.arms.split(",") if args.arms else default_arm_names(baseline)
    if args.conditions:
        found = prepared["conditions"]["conditions"]
        items = [
            (args.results / name, c["itl_slo_ms"], c["num_decoders"]) for name, c in found.items()
        ]
    else:
        items = [(args.results, args.itl_slo_ms, args.decoders)]
    runs = []
    for folder, slo, decoders in items:
        patch_slo = slo if (args.conditions or args.itl_slo_ms is not None) else None
        arms = tuple(Arm(n, arm_patch(n, patch_slo)) for n in names)
        runs.append(
            EpisodeRun(
                results_dir=folder,
                client=prepared["client"],
                shape=replace(shape, num_decoders=decoders),
                arms=arms,
                num_episodes=args.episodes,
                itl_slo_ms=float(slo if slo is not None else baseline["itl_slo_ms"]),
                admin_token=args.admin_token,
                ready_timeout_s=args.ready_timeout_s,
            )
        )
    return runs


def analyse(folder: Path, check: bool, plots: bool) -> int:
    """Recompute ``summary.json`` (and the plot) of one episodes folder from its records."""
    from bench.report import save_summary, summary_differences

    plan_path = folder / "episodes.json"
    if not plan_path.exists():
        print(f"bench episodes: {plan_path} is missing: nothing recorded here", file=sys.stderr)
        return 2
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    summary = summarize_episodes(read_records(folder), float(plan["itl_slo_ms"]))
    summary = {"results_dir": str(folder), "plan": plan, **summary}
    print(f"## {folder}\n\n{format_episodes_markdown(summary)}\n")
    if check:
        differences = summary_differences(folder, summary)
        for line in differences[:20]:
            print(f"differs: {line}", file=sys.stderr)
        print(f"{folder / 'summary.json'}: {'differs' if differences else 'matches the records'}")
        return 1 if differences else 0
    print(f"summary: {save_summary(folder, summary)}")
    if plots:
        from bench.plots import episode_frontier

        print(f"plot: {episode_frontier(summary, folder)}")
    return 0


def folders(results: Path) -> list[Path]:
    """The episodes folders under ``results``: itself, or one per condition."""
    if (results / "episodes.json").exists():
        return [results]
    return sorted(p.parent for p in results.glob("*/episodes.json"))


def handler(args: argparse.Namespace) -> int:
    try:
        if args.base_url:
            counter = load_counter(args.tokenizer)
            prepared = asyncio.run(_prepare(args, counter))
            for run in _runs(args, prepared):
                print(
                    f"[episodes] {run.results_dir}: {len(run.arms)} arms x {run.num_episodes} "
                    f"episodes, {run.shape.num_decoders} decoding streams, ITL objective "
                    f"{run.itl_slo_ms:g} ms",
                    file=sys.stderr,
                )
                asyncio.run(run_episodes(run, prepared["baseline"], counter))
    except (EndpointError, ValueError) as exc:
        print(f"bench episodes: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "bench episodes: interrupted; recorded runs are kept, rerun to resume", file=sys.stderr
        )
        return 130
    found = folders(args.results)
    if not found:
        print(f"bench episodes: nothing recorded under {args.results}", file=sys.stderr)
        return 2
    return max(analyse(folder, args.check, not args.no_plots) for folder in found)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from bench.options import add_admin_option, add_server_options

    p = sub.add_parser(
        "episodes",
        help="interference episodes: every arm on one gateway, paired by episode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_options(p)
    add_admin_option(p)
    p.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS, help=f"(default {DEFAULT_RESULTS})"
    )
    p.add_argument("--episodes", type=int, default=6, help="episodes per arm (6)")
    p.add_argument("--decoders", type=int, default=4, help="decoding streams per episode (4)")
    p.add_argument("--kinds", default="long,short,long,short", help="the arrivals, in order")
    p.add_argument("--offsets", default="0,0.5,1.5,2", help="their send offsets, s")
    p.add_argument("--max-tokens", type=int, default=8, help="tokens per arrival (8)")
    p.add_argument(
        "--lead-s", type=float, default=1.0, help="decoding alone before the arrivals, s (1)"
    )
    p.add_argument("--tail-s", type=float, default=0.5, help="decoding after the window, s (0.5)")
    p.add_argument(
        "--long-prefill-s",
        type=float,
        default=3.0,
        help="size long prompts to about this much lone prefill, measured at the start (3)",
    )
    p.add_argument(
        "--arms",
        help=f"comma-separated: off, fixed-<tokens>, dlfp, dlfp-ct, {SENTINEL} (default: off, "
        "fixed at 8, 16, ... up to max_cap_tokens, dlfp, dlfp-ct and the sentinel)",
    )
    p.add_argument(
        "--itl-slo-ms",
        type=float,
        help="judge by this objective instead of the gateway's, and set it as every arm's "
        "itl_slo_ms",
    )
    p.add_argument(
        "--conditions",
        action="store_true",
        help="the baseline's four conditions (one folder each): itl_slo_ms at the gateway's "
        "setting and at min(3 x lone decode step, 0.6 x it), with 2 and 8 decoding streams",
    )
    p.add_argument("--tokenizer", help="local tokenizer directory for prompt lengths")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--check",
        action="store_true",
        help="recompute from the records and compare with summary.json, writing nothing",
    )
    p.set_defaults(handler=handler)
