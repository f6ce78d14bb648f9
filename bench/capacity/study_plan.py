"""The steps ``bench/run_study.sh`` takes for a study, one shell-quoted line each.

    python -m bench.capacity.study_plan results bench/studies/capacity.toml    # its results folder
    python -m bench.capacity.study_plan plan bench/studies/capacity.toml --out DIR --port 8100 \\
        --tokenizer TOK --admin-token TOKEN [--parts "headline fixed-caps"] [-- --seeds 802]

A step is a verb and its arguments: ``record-cpu DIR``, ``copy-missing SRC DST``,
``serve NAME ARGS...`` (a gateway), ``serve-vllm NAME``, ``save-admin FILE``, ``stop``,
``gateway ARGS...`` (``python -m gateway ARGS``), ``python ARGS...`` and ``try STEP``
(a step whose failure does not stop the study). A server is started only when a part
needs another one than the one running, so the parts that share a server share its
engine start. Arguments after ``--`` go to every part's trials (the runner's SEEDS,
RATES, NREQ, ROTATE and ARMS).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.capacity.study import Part, Study, load_study

Step = list[str]


def _filled(words: Sequence[str], values: dict[str, str]) -> list[str]:
    return [w.format(**values) for w in words]


def _command(words: list[str]) -> Step:
    if words[0] == "bench":
        return ["gateway", *words]
    if words[0] == "python":
        return words
    raise ValueError(f"a command starts with bench or python, got {words[0]!r}")


def _server_steps(part: Part, out: Path) -> list[Step]:
    if part.server == "vllm":
        return [["serve-vllm", "vllm"]]
    if part.server == "none":
        return []
    name = part.name if part.serve else "gateway"
    saved = out / "logs" / f"admin-dlfp-{name}.json"
    return [["serve", name, *part.serve], ["save-admin", str(saved)]]


def plan(
    study: Study,
    out: Path,
    values: dict[str, str],
    parts: Sequence[str] = (),
    calibration: str | None = None,
    extra: Sequence[str] = (),
) -> list[Step]:
    """The steps for ``parts`` (default: all, in the study's order)."""
    chosen = [study.part(name) for name in parts] if parts else list(study.parts)
    steps: list[Step] = [["record-cpu", str(out)]]
    source = study.calibration_from if calibration is None else calibration
    if source and source != "none":
        steps.append(["copy-missing", source, str(out / "calibration.json")])
    running: tuple[str, ...] | None = None
    sweep = trials = False
    for part in chosen:
        wanted = (part.server, *part.serve)
        if wanted != running:
            if running is not None and running[0] != "none":
                steps.append(["stop"])
            steps += _server_steps(part, out)
            running = wanted
        if part.run:
            done = part.unless_exists and Path(part.unless_exists.format(**values)).exists()
            if not done:
                steps.append(_command(_filled(part.run, values)))
            continue
        is_sweep = study.is_sweep(part)
        sweep, trials = sweep or is_sweep, trials or not is_sweep
        steps.append(
            [
                "gateway",
                "bench",
                *(["sweep"] if is_sweep else []),
                "--study",
                str(study.path),
                "--part",
                part.name,
                "--results",
                str(out),
                "--base-url",
                values["base_url"],
                "--tokenizer",
                values["tokenizer"],
                "--admin-token",
                values["admin_token"],
                *extra,
            ]
        )
    if running is not None and running[0] != "none":
        steps.append(["stop"])
    if trials:
        for candidate in study.compare:
            pair = ["--baseline", study.baseline, "--candidate", candidate]
            steps.append(["try", "gateway", "bench", "compare", "--results", str(out), *pair])
        steps.append(["gateway", "bench", "summary", "--results", str(out), "--plots"])
    if sweep:
        steps.append(["gateway", "bench", "sweep", "--results", str(out)])
    steps += [_command(_filled(c, values)) for c in study.after]
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.capacity.study_plan", description=__doc__
    )
    sub = parser.add_subparsers(dest="command", required=True)
    results = sub.add_parser("results", help="print the study's default results folder")
    results.add_argument("study", type=Path)
    p = sub.add_parser("plan", help="print the steps, one shell-quoted line each")
    p.add_argument("study", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--admin-token", required=True)
    p.add_argument("--parts", default="", help="part names separated by spaces (default all)")
    p.add_argument("--calibration", help="a calibration.json to copy in, or none")
    argv = sys.argv[1:] if argv is None else argv
    # After --: options for every part's trials, passed on as they are.
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - (1 if "--" in argv else 0)])
    try:
        study = load_study(args.study)
        if args.command == "results":
            print(study.results)
            return 0
        values = {
            "out": str(args.out),
            "base_url": f"http://127.0.0.1:{args.port}",
            "tokenizer": args.tokenizer,
            "admin_token": args.admin_token,
        }
        steps = plan(study, args.out, values, args.parts.split(), args.calibration, extra)
    except ValueError as exc:
        print(f"study: {exc}", file=sys.stderr)
        return 2
    for step in steps:
        print(shlex.join(step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
