"""What ``bench episodes`` measures and decides before the first episode.

The arms (``off``, the static caps up to ``max_cap_tokens``, ``dlfp``, ``dlfp-ct`` and a
second ``dlfp-ct`` as a sentinel) and the admin patch that selects each; the long
prompts' length, sized to about a given lone prefill time on this machine; the lone
decode step; and the baseline's four conditions.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench.episodes.stats import SENTINEL
from bench.lib.calibrate import PROBE_TOKENS
from bench.lib.client import ClientSettings, new_record, stream_into
from bench.lib.endpoint import EndpointError
from bench.lib.stats import request_gaps
from bench.lib.tokens import TokenCounter
from bench.lib.workload import RequestSpec, make_prompt

TARGET_PLAN = "dlfp-ct-target"
"""The arm of ``dlfp-ct`` planning to a target instead of the streams' deadlines."""
BOUNDED = "dlfp-ct-max-"
"""``dlfp-ct-max-<tokens>``: ``dlfp-ct`` with every step's prefill bounded by ``<tokens>``
(``max_cap_tokens``, and the initial and fixed caps within it)."""
FULL = "dlfp-ct-full"
"""``dlfp-ct`` filling every step to its slack (``step_rate_loss`` 0)."""
RATE_LOSS = "dlfp-ct-loss-"
"""``dlfp-ct-loss-<percent>``: ``dlfp-ct`` with ``step_rate_loss`` ``<percent>`` / 100."""
MAX_RATE_LOSS_PERCENT = 50
"""``step_rate_loss``'s ceiling, in percent: a larger arm is refused before the first
episode, not by the gateway at its own."""
SHED = "dlfp-ct-shed"
"""``dlfp-ct`` with admission's ``no_slack`` shedding on, which every other arm runs
without (``loop.ADMISSION_PATCH``)."""
LEN_MARGIN = 64
"""Long prompts are capped at ``max_model_len`` minus this."""
CAP_SHARE = 0.9
"""The cap, in counted tokens, keeps this share of the limit: the server's tokens per
counted token vary from prompt to prompt (much more with ``--tokenizer`` unset)."""
SIZING_ROUNDS = 3
"""Probes of lone long prompts, each correcting the length toward the prefill time asked
for (then one more at the length chosen, to record what it takes)."""
DECODE_PROBE_TOKENS = 64


def default_arm_names(settings: dict[str, Any]) -> list[str]:
    """``off``, ``fixed`` at 8, 16, 32, ... and ``max_cap_tokens``, ``dlfp``, ``dlfp-ct``,
    and the sentinel (a second ``dlfp-ct``) half the order away from ``dlfp-ct``, so that
    the two runs it compares are as far apart in time as two arms usually are."""
    low, high = int(settings["min_cap_tokens"]), int(settings["max_cap_tokens"])
    step = int(settings["step_tokens"])
    caps = [c for c in (8 * 2**k for k in range(20)) if low <= c <= high and c % step == 0]
    if high not in caps:
        caps.append(high)
    names = ["off", *(f"fixed-{c}" for c in caps), "dlfp", "dlfp-ct"]
    names.insert((names.index("dlfp-ct") + (len(names) + 1) // 2) % len(names) + 1, SENTINEL)
    return names


def check_arm_names(names: list[str], settings: dict[str, Any]) -> None:
    """Refuse, before the first episode, duplicate arms and caps the gateway would (a
    static arm's, a bounded one's: the ``fixed_cap_tokens`` its patch sets)."""
    if len(set(names)) != len(names):
        raise ValueError(f"--arms: each arm once, got {','.join(names)}")
    bounds = ("min_cap_tokens", "max_cap_tokens", "step_tokens")
    known = all(k in settings for k in bounds)  # an endpoint that states its caps
    low, high, step = (int(settings[k]) for k in bounds) if known else (0, 0, 1)
    for name in names:
        cap = arm_patch(name, None).get("fixed_cap_tokens")  # refuses an unknown name
        if known and cap is not None and (not low <= cap <= high or cap % step):
            raise ValueError(
                f"--arms: {name} outside the gateway's caps (multiples of {step} "
                f"within [{low}, {high}])"
            )


def arm_patch(name: str, itl_slo_ms: float | None) -> dict[str, Any]:
    """The ``PATCH /admin/dlfp`` body that selects the arm ``name``."""
    extra: dict[str, Any] = {} if itl_slo_ms is None else {"itl_slo_ms": itl_slo_ms}
    if name.startswith("fixed-"):
        if not name[6:].isdigit():
            raise ValueError(f"unknown arm {name!r}: fixed-<tokens>")
        return {"controller": "fixed", "fixed_cap_tokens": int(name[6:])} | extra
    if name == SENTINEL:
        return {"controller": "dlfp-ct"} | extra
    if name in ("off", "dlfp", "dlfp-ct"):
        return {"controller": name} | extra
    if name == TARGET_PLAN:
        return {"controller": "dlfp-ct", "plan": "target"} | extra
    if name == FULL:
        return {"controller": "dlfp-ct", "step_rate_loss": 0.0} | extra
    if name == SHED:
        return {"controller": "dlfp-ct"} | extra
    if name.startswith(RATE_LOSS):
        percent = name.removeprefix(RATE_LOSS)
        if not percent.isdigit() or int(percent) > MAX_RATE_LOSS_PERCENT:
            raise ValueError(
                f"unknown arm {name!r}: {RATE_LOSS}<percent>, 0 to {MAX_RATE_LOSS_PERCENT}"
            )
        return {"controller": "dlfp-ct", "step_rate_loss": int(percent) / 100} | extra
    if name.startswith(BOUNDED):
        if not name.removeprefix(BOUNDED).isdigit():
            raise ValueError(f"unknown arm {name!r}: {BOUNDED}<tokens>")
        cap = int(name.removeprefix(BOUNDED))
        bounds = {"max_cap_tokens": cap, "initial_cap_tokens": cap, "fixed_cap_tokens": cap}
        return {"controller": "dlfp-ct"} | bounds | extra
    raise ValueError(
        f"unknown arm {name!r}: off, fixed-<tokens>, dlfp, dlfp-ct, {BOUNDED}<tokens>, "
        f"{RATE_LOSS}<percent>, {FULL}, {SHED}, {TARGET_PLAN} or {SENTINEL}"
    )


def arm_admission_patch(name: str) -> dict[str, Any] | None:
    """What the arm ``name`` changes in admission's limits for its runs (None: nothing);
    only limits that ``loop.ADMISSION_PATCH`` sets, whose values the run restores."""
    return {"no_slack_check": True} if name == SHED else None


async def prefill_probe(
    http: httpx.AsyncClient,
    client: ClientSettings,
    counter: TokenCounter,
    index: int,
    length: int,
    seed: int = 4900,
    label: str = "[episodes] sizing probe",
) -> dict[str, Any]:
    """One lone long prompt of ``length`` counted tokens (prompt ``index`` of ``seed``):
    its counted and server tokens and its TTFT, printed after ``label``."""
    prompt, counted = make_prompt(seed, index, "long", length, length + 16, counter)
    spec = RequestSpec(index, "long", False, 0.0, prompt, counted)
    one = replace(client, max_tokens=1)
    record = await stream_into(http, one, new_record(spec, 1), time.perf_counter())
    if not record.is_ok or not record.chunk_s or record.send_s is None:
        raise EndpointError(f"{label} {index} failed: {record.error}")
    probe = {
        "tokens": counted,
        "server_tokens": record.num_prompt_tokens or counted,
        "ttft_s": record.chunk_s[0] - record.send_s,
    }
    print(
        f"{label} {index}: {probe['server_tokens']} tokens, TTFT {probe['ttft_s']:.2f} s",
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
    correcting it (prefill is not linear in the length), then one at the length chosen,
    which ``sizing.json`` records as ``final_probe``."""
    path = results_dir / "sizing.json"
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        print(f"[episodes] long prompts: {saved['long_tokens']} tokens ({path})", file=sys.stderr)
        return int(saved["long_tokens"])
    probe_client = replace(client, cache_salt=f"dlfp-sizing-{uuid.uuid4().hex[:12]}")
    limit = max_model_len - LEN_MARGIN
    probes = [await prefill_probe(http, probe_client, counter, 0, min(PROBE_TOKENS, limit // 4))]
    length = int(probes[0]["tokens"])
    for index in range(1, SIZING_ROUNDS + 1):
        probe = await prefill_probe(http, probe_client, counter, index, length)
        probes.append(probe)
        per_counted = probe["server_tokens"] / probe["tokens"]
        scale = min(prefill_s / probe["ttft_s"], limit / probe["server_tokens"])
        cap = math.floor(CAP_SHARE * limit / per_counted)
        length = max(1, min(math.floor(length * scale), cap))
    final = await prefill_probe(http, probe_client, counter, SIZING_ROUNDS + 1, length)
    saved = {
        "prefill_s": prefill_s,
        "probes": probes,
        "final_probe": final,
        "counter": counter.name,
        "max_model_len": max_model_len,
        "long_tokens": length,
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    print(f"[episodes] long prompts: {length} tokens", file=sys.stderr)
    return length


async def lone_decode_probe_ms(
    http: httpx.AsyncClient, client: ClientSettings, num_streams: int = 1
) -> float:
    """Median gap of ``num_streams`` streams decoding together and alone on the gateway
    (``DECODE_PROBE_TOKENS`` tokens each)."""
    probe = replace(client, max_tokens=DECODE_PROBE_TOKENS)

    async def one() -> list[float]:
        text = f"[probe {uuid.uuid4().hex[:12]}] Count on."
        spec = RequestSpec(0, "short", False, 0.0, text, 0)
        record = await stream_into(
            http, probe, new_record(spec, DECODE_PROBE_TOKENS), time.perf_counter()
        )
        if not record.is_ok:
            raise EndpointError(f"the decode probe failed: {record.error}")
        return [g for g in request_gaps(record) if g > 0]

    gaps = [
        g for found in await asyncio.gather(*(one() for _ in range(num_streams))) for g in found
    ]
    if not gaps:
        raise EndpointError("the decode probe saw no gap")
    return 1000 * statistics.median(gaps)


THIN_SLACK = 1.7
"""The thin-slack condition's objective, in decode-only steps of ``THIN_DECODERS`` streams."""
THIN_DECODERS = 8


def conditions(
    default_slo_ms: float, decode_step_ms: float, thin_decode_step_ms: float | None = None
) -> dict[str, dict[str, Any]]:
    """The baseline's four conditions: two objectives, each with 2 and 8 decoding streams;
    and, given the decode-only step of ``THIN_DECODERS`` streams, a fifth where the slack
    is thin: ``THIN_SLACK`` times that step, with that many streams."""
    # Down to a multiple of 10 ms, and no lower than the objective's floor of 10 ms.
    tight = max(10, math.floor(min(3 * decode_step_ms, 0.6 * default_slo_ms) / 10) * 10)
    out = {}
    for slo in (default_slo_ms, float(tight)):
        for decoders in (2, 8):
            out[f"slo{slo:g}-d{decoders}"] = {"itl_slo_ms": slo, "num_decoders": decoders}
    if thin_decode_step_ms is not None:
        thin = float(max(10, math.floor(THIN_SLACK * thin_decode_step_ms / 10) * 10))
        out[f"slo{thin:g}-d{THIN_DECODERS}-thin"] = {
            "itl_slo_ms": thin,
            "num_decoders": THIN_DECODERS,
        }
    return out
