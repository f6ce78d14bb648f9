"""``dlfp-gateway bench gpu-check``: the GPU path end to end, in minutes, with no download.

It starts a gateway on an 8B-shaped Llama model (Llama-3-8B's shape: 4,096 hidden, 32
layers, 32 query and 8 KV heads, 14,336 MLP, a 128,256-token vocabulary, 8,192 positions;
8.03B parameters, at least 24 GB of GPU memory) made here: the
embedded model's tokenizer and vLLM's ``load_format=dummy``, so the weights are random,
the timings are real and the text is meaningless. ``--shape 1b`` is a smaller Llama for
smaller GPUs; ``--model DIR`` a real local model. Then it checks, and prints as a table:

- ``scheduler``: ``DLFPAsyncScheduler`` with async scheduling and a batch queue of 2 on
  CUDA (``DLFPScheduler``, synchronous, on the CPU);
- ``device_ms``: with ``observation: device``, every completed step has ``device_ms``,
  and a ``dlfp-ct`` step's ``observation_ms`` equals it;
- ``controller moves``: the cap or the margin takes more than one value over the mixed
  steps of a load with long prompts;
- ``episodes``: on ``bench episodes`` with long prompts (``off`` and ``dlfp-ct``),
  ``dlfp-ct``'s window P99 gap is within the objective where ``off``'s is not;
- ``device against the streams``: where the device is the bottleneck (the device was busy
  for at least ``BOTTLENECK_BUSY`` of a decode-only phase, by the sum of the steps'
  ``device_ms`` over its wall time), the median ``device_ms`` of its steps is within 15%
  of the median gap the clients saw.

On the CPU (``--device cpu``) the last two are reported, not asserted: a CPU engine is the
host, and the tiny models the tests use prefill too fast for a cap to matter. It writes
``gpu-check.json``, ``steps.json.gz`` and ``device-vs-completion.png`` to ``--out``, and
exits 1 when a check fails. Without matplotlib (the ``bench`` extra, which the GPU image
leaves out) it skips the plots and says so.

    dlfp-gateway bench gpu-check --out bench/results/gpu-check
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import itertools
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.lib.endpoint import EndpointError, apply_admin_patch, bearer, reset_controller

SHAPES: dict[str, dict[str, int]] = {
    "8b": {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "max_position_embeddings": 8192,
        # NOTE: Llama-3's vocabulary, not the tokenizer's: the embedding and the LM head
        # hold about 1B of the 8B; the tokenizer's ids are all below it.
        "vocab_size": 128256,
    },
    "1b": {
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "max_position_embeddings": 8192,
    },
}
"""Llama shapes (``LlamaForCausalLM``) with random weights (``load_format=dummy``); without
a ``vocab_size``, the tokenizer's."""
REQUIRED_ENGINE_ARGS = {"load_format": "dummy"}
"""What the random-weight model needs of vLLM; the operator's other engine arguments stay."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
BOTTLENECK_BUSY = 0.9
"""Share of a decode-only phase the device must be busy for to call it the bottleneck."""
DEVICE_GAP_TOLERANCE = 0.15
READY_TIMEOUT_S = 900.0
VERDICTS = {True: "pass", False: "FAIL", None: "reported"}
"""A check's result as printed: asserted and met or not, or only reported."""
PRIVATE_VARS = ("DLFP_ADMIN_TOKEN", "DLFP_API_KEYS", "DLFP_PRIORITY_API_KEYS")
"""Settings (and their ``_FILE`` twins) the check's own gateway does without."""


@dataclass
class Check:
    name: str
    passed: bool | None
    """None: reported, not asserted (on the CPU)."""
    detail: str


@dataclass
class Report:
    device: str
    model: str
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, passed: bool | None, detail: str) -> None:
        self.checks.append(Check(name, passed, detail))
        print(f"[gpu-check] {name}: {VERDICTS[passed]}: {detail}", file=sys.stderr)

    @property
    def ok(self) -> bool:
        return all(check.passed is not False for check in self.checks)

    def table(self) -> str:
        rows = ["| check | result | detail |", "| --- | --- | --- |"]
        for check in self.checks:
            verdict = "**fail**" if check.passed is False else VERDICTS[check.passed]
            rows.append(f"| {check.name} | {verdict} | {check.detail} |")
        return "\n".join(rows)


def make_model_dir(shape: str, tokenizer_dir: Path, out: Path) -> Path:
    """A Llama ``config.json`` of ``shape`` beside the tokenizer's files (no weights)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, out / name)
    dims = SHAPES[shape]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": tokenizer_vocab_size(tokenizer_dir),
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
        **dims,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return out


def tokenizer_vocab_size(tokenizer_dir: Path) -> int:
    """One past the tokenizer's highest id. NOTE: the special tokens are usually in the
    vocabulary too (SmolLM2's are), so adding their count would count them twice."""
    tokenizer = json.loads((tokenizer_dir / "tokenizer_config.json").read_text("utf-8"))
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text("utf-8"))["model"]["vocab"]
    ids = [*vocab.values(), *(int(i) for i in tokenizer.get("added_tokens_decoder", {}))]
    return int(max(ids)) + 1


def num_parameters(config: dict[str, Any]) -> int:
    """A Llama ``config.json``'s parameter count (untied embeddings, no biases)."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    attention = 2 * hidden * hidden + 2 * hidden * kv
    mlp = 3 * hidden * config["intermediate_size"]
    layer = attention + mlp + 2 * hidden  # and its two RMSNorms
    heads = 2 if not config.get("tie_word_embeddings") else 1
    return int(config["num_hidden_layers"] * layer + heads * vocab * hidden + hidden)


def merged_engine_args(operator: str | None) -> str:
    """The operator's ``DLFP_ENGINE_ARGS`` (a JSON object) with the check's required keys
    over it: the check cannot run on random weights without them, and keeps the rest."""
    args: dict[str, Any] = json.loads(operator) if operator and operator.strip() else {}
    if not isinstance(args, dict):
        raise ValueError(f"DLFP_ENGINE_ARGS must be a JSON object, not {operator!r}")
    return json.dumps({**args, **REQUIRED_ENGINE_ARGS})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gateway:
    """``python -m gateway serve`` for the check, its log in the results folder."""

    def __init__(self, model_dir: Path, device: str, dummy: bool, out: Path) -> None:
        self.port = _free_port()
        self.token = secrets.token_hex(8)
        self.url = f"http://127.0.0.1:{self.port}"
        # NOTE: a private gateway on this host: the deployment's keys stay out (and a
        # DLFP_ADMIN_TOKEN beside a DLFP_ADMIN_TOKEN_FILE would be refused at start).
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_VARS)}
        env = {
            **inherited,
            "DLFP_HOST": "127.0.0.1",
            "DLFP_PORT": str(self.port),
            "DLFP_MODEL": str(model_dir),
            "DLFP_SERVED_MODEL_NAME": "gpu-check",
            "DLFP_DEVICE": device,
            "DLFP_ADMIN_TOKEN": self.token,
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        if dummy:
            env["DLFP_ENGINE_ARGS"] = merged_engine_args(env.get("DLFP_ENGINE_ARGS"))
        if device == "cuda":
            env.setdefault("DLFP_DTYPE", "bfloat16")
            env.setdefault("DLFP_MAX_MODEL_LEN", "8192")
        self.log_path = out / "gateway.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    tail = self.log_path.read_text("utf-8", errors="replace")[-3000:]
                    raise RuntimeError(f"the gateway exited ({self.process.returncode}):\n{tail}")
                try:
                    if client.get(self.url + "/ready").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(2.0)
        raise RuntimeError(f"the gateway was not ready within {READY_TIMEOUT_S:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.token)


async def _stream(client: httpx.AsyncClient, url: str, prompt: str, num_tokens: int) -> list[float]:
    """The arrival times (perf_counter) of a completion's chunks."""
    body = {
        "model": "gpu-check",
        "prompt": prompt,
        "max_tokens": num_tokens,
        "min_tokens": num_tokens,
        "stream": True,
    }
    times: list[float] = []
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:") and line.strip() != "data: [DONE]":
                times.append(time.perf_counter())
    return times


def _gaps_ms(times: list[float]) -> list[float]:
    return [(b - a) * 1000.0 for a, b in itertools.pairwise(times)]


async def _steps(client: httpx.AsyncClient, gateway: Gateway, since: int) -> list[dict[str, Any]]:
    response = await client.get(
        gateway.url + "/admin/dlfp/steps", params={"since": since}, headers=gateway.headers
    )
    response.raise_for_status()
    steps: list[dict[str, Any]] = response.json()["steps"]
    return steps


async def _admin(
    client: httpx.AsyncClient, gateway: Gateway, method: str, path: str, **kwargs: Any
) -> dict[str, Any]:
    response = await client.request(method, gateway.url + path, headers=gateway.headers, **kwargs)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


async def run_load(
    gateway: Gateway, report: Report, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """A decode-only phase, then long prompts beside the decodes; every step they made."""
    async with httpx.AsyncClient(timeout=600.0) as client:
        state = await _admin(client, gateway, "GET", "/admin/dlfp")
        live = state.get("state", state)
        expected = (
            ("DLFPAsyncScheduler", True, 2) if report.device == "cuda" else ("DLFPScheduler",)
        )
        found = (
            live.get("scheduler_cls"),
            live.get("async_scheduling"),
            live.get("batch_queue_size"),
        )
        report.add(
            "scheduler",
            found[: len(expected)] == expected,
            f"{found[0]}, async scheduling {found[1]}, batch queue {found[2]}",
        )
        patch = {"controller": "dlfp-ct", "observation": "device"}
        await apply_admin_patch(client, gateway.url, patch, gateway.token)
        await reset_controller(client, gateway.url, gateway.token)
        start = int((await _admin(client, gateway, "GET", "/admin/dlfp/steps"))["next"])
        word = "tokens "
        decode_started = time.perf_counter()
        decoders = [
            _stream(client, gateway.url, f"{i} {word * 8}", args.decode_tokens)
            for i in range(args.decoders)
        ]
        decode_only = await asyncio.gather(*decoders)
        decode_wall_s = time.perf_counter() - decode_started
        decode_steps = await _steps(client, gateway, start)
        mixed_start = (decode_steps[-1]["step_index"] + 1) if decode_steps else start
        long_prompt = word * args.long_words
        await asyncio.gather(
            *[
                _stream(client, gateway.url, f"{i} {word * 8}", args.decode_tokens)
                for i in range(args.decoders)
            ],
            *[_stream(client, gateway.url, f"{i} {long_prompt}", 4) for i in range(2)],
        )
        mixed_steps = await _steps(client, gateway, mixed_start)
    _check_device_ms(report, decode_steps + mixed_steps)
    _check_controller_moves(report, mixed_steps)
    _check_device_against_streams(report, decode_steps, decode_only, decode_wall_s)
    return decode_steps + mixed_steps


def _check_device_ms(report: Report, steps: list[dict[str, Any]]) -> None:
    done = [s for s in steps if s.get("busy_ms") is not None]
    missing = [s for s in done if s.get("device_ms") is None]
    observed = [s for s in done if s.get("mode") == "dlfp-ct" and s.get("observation_ms")]
    unequal = [s for s in observed if s["observation_ms"] != s.get("device_ms")]
    report.add(
        "device_ms",
        bool(done) and not missing and bool(observed) and not unequal,
        f"{len(done) - len(missing)} of {len(done)} completed steps carry it; "
        f"observation_ms differs on {len(unequal)} of {len(observed)} dlfp-ct steps",
    )


def _check_controller_moves(report: Report, steps: list[dict[str, Any]]) -> None:
    mixed = [s for s in steps if s.get("is_mixed")]
    caps = {s.get("cap_tokens") for s in mixed}
    margins = {round(s["margin"], 4) for s in mixed if s.get("margin") is not None}
    report.add(
        "controller moves",
        len(caps) > 1 or len(margins) > 1,
        f"{len(mixed)} mixed steps, {len(caps)} cap values, {len(margins)} margin values",
    )


def _check_device_against_streams(
    report: Report,
    steps: list[dict[str, Any]],
    streams: list[list[float]],
    wall_s: float,
) -> None:
    device = [s["device_ms"] for s in steps if s.get("device_ms") is not None]
    gaps = [gap for times in streams for gap in _gaps_ms(times)]
    if not device or not gaps or wall_s <= 0:
        report.add("device against the streams", False, "no device time or no stream gaps")
        return
    busy = sum(device) / 1000.0 / wall_s
    median_device, median_gap = statistics.median(device), statistics.median(gaps)
    error = abs(median_device - median_gap) / median_gap
    report.figures |= {
        "decode_only_device_busy": busy,
        "decode_only_median_device_ms": median_device,
        "decode_only_median_stream_gap_ms": median_gap,
    }
    detail = (
        f"device busy {busy:.0%} of the decode-only phase; median device {median_device:.1f} ms "
        f"against a median stream gap of {median_gap:.1f} ms ({error:+.0%})"
    )
    if report.device != "cuda":
        report.add("device against the streams", None, detail + " (CPU)")
    elif busy < BOTTLENECK_BUSY:
        report.add("device against the streams", None, detail + ": the host is the bottleneck")
    else:
        report.add("device against the streams", error <= DEVICE_GAP_TOLERANCE, detail)


def run_episodes(gateway: Gateway, report: Report, args: argparse.Namespace, out: Path) -> None:
    """``bench episodes`` for ``off`` and ``dlfp-ct`` on this gateway."""
    folder = out / "episodes"
    command = [
        sys.executable,
        "-m",
        "gateway",
        "bench",
        "episodes",
        "--base-url",
        gateway.url,
        "--admin-token",
        gateway.token,
        "--tokenizer",
        str(args.tokenizer_dir),
        "--arms",
        "off,dlfp-ct",
        "--episodes",
        str(args.episodes),
        "--decoders",
        str(args.decoders),
        "--long-prefill-s",
        str(args.long_prefill_s),
        "--results",
        str(folder),
    ]
    if not can_plot():
        command.append("--no-plots")
    subprocess.run(command, check=False)
    summaries = sorted(folder.rglob("summary.json"))
    if not summaries:
        report.add("episodes", False, "bench episodes wrote no summary")
        return
    summary = json.loads(summaries[0].read_text("utf-8"))
    slo = float(summary["itl_slo_ms"])
    gap = {arm: summary["arms"].get(arm, {}).get("window_p99_gap_ms") for arm in ("off", "dlfp-ct")}
    report.figures["episodes_window_p99_gap_ms"] = gap
    if gap["off"] is None or gap["dlfp-ct"] is None:
        report.add("episodes", False, f"incomplete arms: {gap}")
        return
    detail = (
        f"window P99 gap: dlfp-ct {gap['dlfp-ct']:.0f} ms, off {gap['off']:.0f} ms, "
        f"objective {slo:g} ms"
    )
    passed = gap["dlfp-ct"] <= slo < gap["off"]
    report.add("episodes", passed if report.device == "cuda" else None, detail)


def can_plot() -> bool:
    """Whether matplotlib (the ``bench`` extra) is installed."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # None in sys.modules: blocked, as in the tests
        return False


def plot_steps(steps: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [
        (s["completion_interval_ms"], s["device_ms"], bool(s.get("is_mixed")))
        for s in steps
        if s.get("device_ms") is not None and s.get("completion_interval_ms") is not None
    ]
    fig, ax = plt.subplots(figsize=(6, 5))
    for mixed, colour, label in ((False, "tab:blue", "decode-only"), (True, "tab:red", "mixed")):
        xs = [c for c, _, m in pairs if m == mixed]
        ys = [d for _, d, m in pairs if m == mixed]
        ax.scatter(xs, ys, s=8, c=colour, label=label)
    top = max([1.0, *[max(c, d) for c, d, _ in pairs]])
    ax.plot([0, top], [0, top], "k--", linewidth=0.8, label="equal")
    ax.set_xlabel("completion interval, ms (what a stream waits)")
    ax.set_ylabel("device time, ms")
    ax.set_title("gpu-check: device time against completion interval")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _host() -> dict[str, Any]:
    listed = (
        subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
        if shutil.which("nvidia-smi")
        else None
    )
    import torch  # only its build facts: nothing here touches CUDA

    return {
        "gpus": listed.stdout.strip().splitlines() if listed and listed.returncode == 0 else [],
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "image_cuda": os.environ.get("CUDA_VERSION"),
    }


def handler(args: argparse.Namespace) -> int:
    from engine_worker.client.device import detect_device

    device = args.device if args.device != "auto" else detect_device()
    if args.device == "auto" and device != "cuda":
        print("bench gpu-check: no NVIDIA GPU listed by nvidia-smi -L", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.tokenizer_dir is None:
        from engine_worker.client.embedded_model import ensure_embedded_model

        args.tokenizer_dir = args.model or ensure_embedded_model()
    if args.model is not None:
        model_dir, dummy, model = Path(args.model), False, str(args.model)
    else:
        model_dir = make_model_dir(
            args.shape, Path(args.tokenizer_dir), out / f"model-{args.shape}"
        )
        dummy, model = True, f"{args.shape}-shaped Llama, random weights"
    report = Report(device=device, model=model)
    started = time.monotonic()
    gateway = Gateway(model_dir, device, dummy, out)
    steps: list[dict[str, Any]] = []
    try:
        gateway.wait_ready()
        report.figures["ready_s"] = round(time.monotonic() - started, 1)
        steps = asyncio.run(run_load(gateway, report, args))
        run_episodes(gateway, report, args, out)
    except (RuntimeError, httpx.HTTPError, EndpointError) as exc:
        report.add("run", False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    finally:
        gateway.stop()
    report.figures["seconds"] = round(time.monotonic() - started, 1)
    with gzip.open(out / "steps.json.gz", "wt", encoding="utf-8") as f:
        json.dump(steps, f)
    if steps and can_plot():
        plot_steps(steps, out / "device-vs-completion.png")
    elif steps:
        print("[gpu-check] plots skipped: matplotlib is not installed", file=sys.stderr)
    record = {
        "command": " ".join(sys.argv),
        "date_unix_s": time.time(),
        "host": _host(),
        **asdict(report),
        "ok": report.ok,
    }
    (out / "gpu-check.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(report.table())
    print(f"results: {out}")
    return 0 if report.ok else 1


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "gpu-check",
        help="the GPU path end to end on a random-weight model, with no download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/gpu-check"))
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    p.add_argument("--model", type=Path, help="a real local model directory instead")
    p.add_argument("--tokenizer-dir", type=Path, help="default: the embedded model's")
    p.add_argument("--decoders", type=int, default=4, help="decoding streams (4)")
    p.add_argument("--decode-tokens", type=int, default=64, help="tokens each decodes (64)")
    p.add_argument("--long-words", type=int, default=3000, help="words of a long prompt")
    p.add_argument("--episodes", type=int, default=2, help="episodes per arm (2)")
    p.add_argument("--long-prefill-s", type=float, default=1.0, help="long prompts' prefill, s")
    p.set_defaults(handler=handler)
