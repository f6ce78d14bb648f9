"""Declarative studies: a TOML file of arms, rates and seeds, read by ``bench --study``
and ``bench sweep --study`` (and planned for ``bench/run_study.sh`` by
``bench.capacity.study_plan``).

A study answers one question (``about``) with named parts, run in order; a part picks
arms from the study's arm table and may override the study's options::

    about = "How many requests a second does each arm serve within its SLOs?"
    results = "bench/results/capacity"      # the default results folder

    [options]                               # defaults of the bench options, for every part
    num_requests = 60
    rates = [0.1, 0.15, 0.2]                # rates: a sweep (rate-<r>/); rate: one rate
    seeds = [801]

    [arms]                                  # name = its PATCH /admin/dlfp body ({}: none)
    off = { controller = "off" }
    dlfp-ct = { controller = "dlfp-ct" }

    [[parts]]
    name = "headline"
    arms = ["off", "dlfp-ct"]
    seeds = [801, 802]                      # a part's own options win over the study's

An option given on the command line wins over both; ``--arm NAME`` with a name from the
arm table takes the table's patch.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPTION_TYPES: dict[str, type] = {
    "seeds": list,
    "rates": list,
    "rate": float,
    "num_requests": int,
    "warmup": int,
    "max_tokens": int,
    "long_fraction": float,
    "long_min_tokens": int,
    "long_max_tokens": int,
    "calibrate": float,
    "stop_below": float,
    "rotate": int,
}
"""The bench options a study may set, by their argparse names, and their TOML types."""
SERVERS = ("gateway", "vllm", "none")
"""What a part runs against: the gateway (``serve`` args), vLLM's own server, or nothing."""
_PART_KEYS = {"name", "about", "arms", "serve", "server", "run", "unless_exists"}
_STUDY_KEYS = {"about", "results", "calibration_from", "baseline", "compare", "after"}


@dataclass(frozen=True)
class Part:
    """One step of a study: trials of some arms, or one command (``run``)."""

    name: str
    about: str = ""
    arms: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    server: str = "gateway"
    serve: tuple[str, ...] = ()
    """``dlfp-gateway serve`` arguments: a part with its own gets its own engine start."""
    run: tuple[str, ...] = ()
    """A command instead of trials: ``bench ...`` or ``python ...``, with ``{out}``,
    ``{base_url}``, ``{tokenizer}`` and ``{admin_token}`` filled in."""
    unless_exists: str = ""
    """Skip ``run`` when this file exists (a result it already wrote)."""


@dataclass(frozen=True)
class Study:
    path: Path
    about: str
    results: Path
    arms: dict[str, dict[str, Any]]
    parts: tuple[Part, ...]
    options: dict[str, Any] = field(default_factory=dict)
    calibration_from: str = ""
    """A ``calibration.json`` to copy into the results first (the same prompt lengths)."""
    baseline: str = "off"
    compare: tuple[str, ...] = ()
    """Arms compared with ``baseline`` (``bench compare``) after a study of one rate."""
    after: tuple[tuple[str, ...], ...] = ()
    """Commands run last, as ``run`` is."""

    def part(self, name: str | None) -> Part:
        names = [p.name for p in self.parts]
        if name is None and len(self.parts) == 1:
            return self.parts[0]
        if name not in names:
            raise ValueError(f"{self.path}: --part one of {', '.join(names)}, got {name!r}")
        return self.parts[names.index(name)]

    def options_for(self, part: Part) -> dict[str, Any]:
        return self.options | part.options

    def is_sweep(self, part: Part) -> bool:
        return "rates" in self.options_for(part)


def _checked_options(where: str, table: dict[str, Any]) -> dict[str, Any]:
    for key, value in table.items():
        kind = OPTION_TYPES.get(key)
        if kind is None:
            raise ValueError(f"{where}: unknown option {key!r} (known: {', '.join(OPTION_TYPES)})")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{where}: {key} is a {kind.__name__}, got {value!r}")
    return table


def _part(where: str, raw: dict[str, Any], arms: dict[str, Any]) -> Part:
    if not isinstance(raw.get("name"), str):
        raise ValueError(f"{where}: every part needs a name")
    where = f"{where} {raw['name']}"
    options = {k: v for k, v in raw.items() if k not in _PART_KEYS}
    unknown = [a for a in raw.get("arms", []) if a not in arms]
    if unknown:
        raise ValueError(f"{where}: arms not in the study's [arms]: {', '.join(unknown)}")
    server = raw.get("server", "gateway")
    if server not in SERVERS:
        raise ValueError(f"{where}: server is one of {', '.join(SERVERS)}, got {server!r}")
    if bool(raw.get("arms")) == bool(raw.get("run")):
        raise ValueError(f"{where}: a part has either arms or run")
    return Part(
        name=raw["name"],
        about=raw.get("about", ""),
        arms=tuple(raw.get("arms", ())),
        options=_checked_options(where, options),
        server=server,
        serve=tuple(raw.get("serve", ())),
        run=tuple(raw.get("run", ())),
        unless_exists=raw.get("unless_exists", ""),
    )


def load_study(path: Path) -> Study:
    """Read and check a study file; a ``ValueError`` names what is wrong and where."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    unknown = set(raw) - _STUDY_KEYS - {"options", "arms", "parts"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {', '.join(sorted(unknown))}")
    arms = raw.get("arms", {})
    parts = tuple(_part(f"{path}: part", p, arms) for p in raw.get("parts", []))
    if not parts:
        raise ValueError(f"{path}: no [[parts]]")
    if len({p.name for p in parts}) < len(parts):
        raise ValueError(f"{path}: two parts share a name")
    missing = [a for a in (raw.get("baseline", "off"), *raw.get("compare", [])) if a not in arms]
    if raw.get("compare") and missing:
        raise ValueError(f"{path}: compare names arms not in [arms]: {', '.join(missing)}")
    return Study(
        path=path,
        about=raw.get("about", ""),
        results=Path(raw.get("results", f"bench/results/{path.stem}")),
        arms=arms,
        parts=parts,
        options=_checked_options(f"{path}: [options]", raw.get("options", {})),
        calibration_from=raw.get("calibration_from", ""),
        baseline=raw.get("baseline", "off"),
        compare=tuple(raw.get("compare", ())),
        after=tuple(tuple(c) for c in raw.get("after", ())),
    )


def arm_spec(study: Study, name: str) -> str:
    """``NAME=PATCH`` as ``--arm`` takes it (``NAME`` alone for an arm without a patch)."""
    patch = study.arms[name]
    return f"{name}={json.dumps(patch)}" if patch else name


def apply_study(args: argparse.Namespace, sweep: bool) -> None:
    """Fill the options left unset on the command line from ``args.study`` (``args.part``)."""
    if args.study is None:
        if args.part is not None:
            raise ValueError("--part needs --study")
        return
    study = load_study(args.study)
    part = study.part(args.part)
    if part.run:
        raise ValueError(f"part {part.name} runs a command, not trials: see bench/run_study.sh")
    if study.is_sweep(part) != sweep:
        use = "bench sweep" if study.is_sweep(part) else "bench (no sweep)"
        raise ValueError(f"part {part.name} of {args.study}: run it with {use}")
    for key, value in study.options_for(part).items():
        if not hasattr(args, key):
            raise ValueError(f"part {part.name}: {key} applies to bench sweep only")
        if getattr(args, key) is not None:
            continue
        if key == "seeds":
            value = tuple(int(s) for s in value)
        elif key == "rates":
            value = ",".join(f"{float(r):g}" for r in value)
        setattr(args, key, value)
    names = args.arm or list(part.arms)
    args.arm = [arm_spec(study, n) if n in study.arms else n for n in names]
