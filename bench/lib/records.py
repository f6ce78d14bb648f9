"""Raw per-request records of one trial, and the JSON-lines file that holds them.

One trial is one (arm, seed) pair. Its file ``<results>/<arm>/seed-<seed>.jsonl.gz``
(gzip-compressed; a plain ``.jsonl`` is read as well) holds a header line
(``"type": "trial"``), one line per request (``"type": "request"``), one line per
``/metrics`` sample (``"type": "metrics"``) and one per scheduler step (``"type": "step"``).
Times are seconds after the trial's start on the client's monotonic clock;
``started_unix_s`` in the header anchors them to wall-clock time.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

FORMAT_VERSION = 1
_SEED_FILE = re.compile(r"^seed-(\d+)\.jsonl(\.gz)?$")
RECORDS_SUFFIX = ".jsonl.gz"
"""New trial files are written compressed: the raw records are most of a results folder."""


def open_text(path: Path, mode: str = "r") -> IO[str]:
    """Open a UTF-8 text file for ``r``, ``w`` or ``a``, through gzip when its name ends
    in ``.gz``. Appending to a ``.gz`` adds a gzip member, which readers take as one stream."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.GzipFile(path, mode + "b"), encoding="utf-8")
    return path.open(mode, encoding="utf-8")


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON (gzip for ``.gz``) whole or not at all: to a hidden partial
    file beside ``path`` (never globbed as a record), then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial{path.suffix}")
    with open_text(partial, "w") as f:
        json.dump(obj, f)
    partial.replace(path)


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line of a ``.jsonl`` or ``.jsonl.gz``."""
    with open_text(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield number, json.loads(line)


def append_jsonl(path: Path, obj: dict[str, Any]) -> None:
    """Add one object as a line (a ``.gz`` file gets one more gzip member)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_text(path, "a") as f:
        f.write(json.dumps(obj) + "\n")


@dataclass
class RequestRecord:
    """What one request sent and what came back, chunk by chunk."""

    index: int
    kind: str
    """``long`` (agent-like) or ``short`` (chat)."""
    is_warmup: bool
    prompt: str
    prompt_sha256: str
    num_prompt_tokens_target: int
    """The prompt's length as the harness counted it (tokenizer or ~4 chars/token)."""
    max_tokens: int
    scheduled_s: float
    """When the open-loop schedule says to send it."""
    send_s: float | None = None
    """When it was actually sent."""
    chunk_s: list[float] = field(default_factory=list)
    """Arrival of every content chunk (a chunk that carries generated tokens)."""
    chunk_num_tokens: list[int | None] = field(default_factory=list)
    """Tokens in each content chunk; None where the endpoint does not say."""
    usage_s: float | None = None
    end_s: float | None = None
    status: str = "pending"
    """``ok`` or ``failed``."""
    error: str | None = None
    http_status: int | None = None
    num_prompt_tokens: int | None = None
    """``usage.prompt_tokens`` as the server reported it."""
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    text: str = ""
    token_ids: list[int] | None = None
    """Generated token ids, where the endpoint returns them (vLLM's ``return_token_ids``)."""
    response_id: str | None = None

    @property
    def is_ok(self) -> bool:
        return self.status == "ok"

    def fail(self, error: str) -> None:
        self.status = "failed"
        self.error = error if self.error is None else f"{self.error}; {error}"


@dataclass
class MetricsSample:
    """One scrape of the server's ``/metrics``: the tracked series that were present."""

    t_s: float
    values: dict[str, float]


@dataclass
class Trial:
    """One (arm, seed) trial: settings, request records, metrics samples."""

    arm: str
    seed: int
    header: dict[str, Any]
    requests: list[RequestRecord]
    samples: list[MetricsSample] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    """The scheduler's per-step telemetry during the trial (``/admin/dlfp/steps``)."""

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.requests if not r.is_warmup]


def trial_path(results_dir: Path, arm: str, seed: int) -> Path:
    """Where a new trial is written (compressed)."""
    return results_dir / arm / f"seed-{seed}{RECORDS_SUFFIX}"


def recorded_trial(results_dir: Path, arm: str, seed: int) -> Path | None:
    """The trial's file if it is recorded, compressed or not."""
    for path in (trial_path(results_dir, arm, seed), results_dir / arm / f"seed-{seed}.jsonl"):
        if path.exists():
            return path
    return None


def write_trial(path: Path, trial: Trial) -> None:
    """Write the whole trial at once: a temp file in the same directory, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"type": "trial", "format": FORMAT_VERSION, "arm": trial.arm, "seed": trial.seed}
    lines = [json.dumps(header | trial.header)]
    lines += [json.dumps({"type": "request", **asdict(r)}) for r in trial.requests]
    lines += [json.dumps({"type": "metrics", **asdict(s)}) for s in trial.samples]
    lines += [json.dumps({"type": "step", **s}) for s in trial.steps]
    text = "\n".join(lines) + "\n"
    data = text.encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=9, mtime=0)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _request_from(obj: dict[str, Any]) -> RequestRecord:
    names = {f.name for f in fields(RequestRecord)}
    return RequestRecord(**{k: v for k, v in obj.items() if k in names})


def read_trial(path: Path) -> Trial:
    header: dict[str, Any] | None = None
    requests: list[RequestRecord] = []
    samples: list[MetricsSample] = []
    steps: list[dict[str, Any]] = []
    for number, obj in read_jsonl(path):
        kind = obj.pop("type", None)
        if kind == "trial":
            header = obj
        elif kind == "request":
            requests.append(_request_from(obj))
        elif kind == "metrics":
            samples.append(MetricsSample(t_s=obj["t_s"], values=obj["values"]))
        elif kind == "step":
            steps.append(obj)
        else:
            raise ValueError(f"{path}:{number}: unknown record type {kind!r}")
    if header is None:
        raise ValueError(f"{path}: no trial header")
    header.pop("format", None)
    arm, seed = str(header.pop("arm")), int(header.pop("seed"))
    return Trial(arm, seed, header, requests, samples, steps)


def find_trials(results_dir: Path) -> dict[str, dict[int, Path]]:
    """``{arm: {seed: path}}`` of every trial file under ``results_dir``.

    A trial recorded both compressed and plain is an error: which one holds it is unclear.
    """
    found: dict[str, dict[int, Path]] = {}
    if not results_dir.is_dir():
        return found
    for arm_dir in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        for file in sorted(arm_dir.iterdir()):
            match = _SEED_FILE.match(file.name)
            if not match:
                continue
            seeds = found.setdefault(arm_dir.name, {})
            seed = int(match.group(1))
            if seed in seeds:
                raise ValueError(f"{arm_dir}: seed {seed} is recorded twice ({file.name})")
            seeds[seed] = file
    return found


def load_arm(results_dir: Path, arm: str) -> dict[int, Trial]:
    paths = find_trials(results_dir).get(arm, {})
    if not paths:
        raise FileNotFoundError(f"no trials of arm {arm!r} under {results_dir}")
    return {seed: read_trial(path) for seed, path in sorted(paths.items())}
