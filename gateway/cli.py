"""``dlfp-gateway``: ``serve`` the gateway, and the sub-commands other packages register
(``bench``, through the ``dlfp_gateway.commands`` entry point).

Every ``serve`` option is a field of ``gateway.settings.Settings``; an option
given on the command line wins over its ``DLFP_*`` variable and ``.env``, and
an option not given leaves them alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from gateway.settings import Settings, SettingsError, describe_error

_ENV_ONLY = {"engine_args"}


def _add_settings_options(parser: argparse.ArgumentParser) -> None:
    for name, field in Settings.model_fields.items():
        if name in _ENV_ONLY:
            continue
        flag = "--" + name.replace("_", "-")
        env = f"DLFP_{name.upper()}"
        default = field.get_default(call_default_factory=True)
        help_text = f"{field.description or ''} [env {env}; default {default}]"
        help_text = help_text.replace("%", "%%")  # argparse formats help with %
        if field.annotation in (bool, bool | None):
            # --name / --no-name
            parser.add_argument(
                flag,
                dest=name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
            continue
        parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, help=help_text)
    parser.add_argument(
        "--engine-arg",
        dest="engine_arg",
        action="append",
        default=argparse.SUPPRESS,
        metavar="NAME=VALUE",
        help="Any other vLLM engine argument, e.g. tensor_parallel_size=2 (repeatable) "
        "[env DLFP_ENGINE_ARGS as a JSON object]",
    )


def _settings_from(args: argparse.Namespace) -> Settings:
    """The validated settings; raises ``SettingsError`` (one line) if one is bad."""
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if k in Settings.model_fields}
    pairs = getattr(args, "engine_arg", None)
    if pairs:
        engine_args = {}
        for pair in pairs:
            name, sep, value = pair.partition("=")
            if not sep or not name:
                raise SettingsError(f"--engine-arg expects NAME=VALUE, got {pair!r}")
            engine_args[name.strip()] = value
        given["engine_args"] = engine_args
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise SettingsError(describe_error(exc)) from exc


def _serve(argv: list[str]) -> int:
    """Exit status 2 and one line on stderr for a bad setting, never a traceback."""
    from gateway.server import serve

    parser = argparse.ArgumentParser(prog="dlfp-gateway serve", description=SERVE_HELP)
    _add_settings_options(parser)
    args = parser.parse_args(argv[1:])
    try:
        settings = _settings_from(args)
        return serve(settings)
    except SettingsError as exc:
        print(f"dlfp-gateway serve: {exc}", file=sys.stderr)
        return 2


SERVE_HELP = (
    "Serve the OpenAI-compatible API. Each option also reads its DLFP_* environment "
    "variable or a .env file."
)


COMMAND_GROUP = "dlfp_gateway.commands"
"""Entry points that add a sub-command to ``dlfp-gateway``. Each names a function that
takes the sub-command parsers, adds its own (for ``--help``), and returns the function
that runs the command on the rest of the command line (``bench`` is one)."""

Runner = Callable[[list[str]], int]


def _parser_and_runners() -> tuple[argparse.ArgumentParser, dict[str, Runner]]:
    parser = argparse.ArgumentParser(
        prog="dlfp-gateway",
        description="OpenAI-compatible LLM gateway over vLLM with DLFP prefill capping.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve the OpenAI-compatible API",
        description=SERVE_HELP,
    )
    _add_settings_options(serve)
    runners = {ep.name: ep.load()(commands) for ep in entry_points(group=COMMAND_GROUP)}
    return parser, runners


def build_parser() -> argparse.ArgumentParser:
    return _parser_and_runners()[0]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return _serve(argv)
    parser, runners = _parser_and_runners()
    if argv[:1] and argv[0] in runners:
        # NOTE: a registered command parses its own arguments; the parser lists it only.
        return runners[argv[0]](argv[1:])
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        raise SystemExit(f"unknown command {args.command}")
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
