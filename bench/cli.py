"""How ``dlfp-gateway`` finds ``bench``: the ``dlfp_gateway.commands`` entry point.

``pyproject.toml`` registers ``register`` under the name ``bench``; the gateway's CLI
calls it to list the command in its ``--help`` and hands ``dlfp-gateway bench ARGV`` to
the function it returns. Nothing here imports the harness itself, so the gateway's help
stays cheap and works without the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable

EXTRA_MODULES = ("matplotlib",)
"""What only the harness needs: the ``bench`` extra."""
INSTALL_EXTRA = "pip install 'dlfp-gateway[bench]'"
WITHOUT_EXTRA = ("gpu-check",)
"""Commands that run without the extra (they skip their plots): the GPU image installs
only the ``gpu`` extra and runs ``bench gpu-check``, which runs ``bench episodes
--no-plots`` there (``PLOTLESS``)."""
PLOTLESS = ("episodes",)
"""Commands that need no extra when given ``--no-plots``."""


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[list[str]], int]:
    """Add ``bench`` to the gateway's sub-commands (for ``--help`` only: it parses its own
    arguments) and return the function that runs it."""
    commands.add_parser(
        "bench",
        help=f"benchmark an OpenAI-compatible endpoint (the bench extra: {INSTALL_EXTRA})",
        add_help=False,
    )
    return main


def missing_extra() -> list[str]:
    """The modules of the ``bench`` extra that are not installed."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


def needs_no_extra(argv: list[str]) -> bool:
    """Whether ``bench ARGV`` runs without matplotlib."""
    command = argv[0] if argv else ""
    return command in WITHOUT_EXTRA or (command in PLOTLESS and "--no-plots" in argv)


def main(argv: list[str]) -> int:
    """``dlfp-gateway bench ARGV``; status 2 and one line when the extra is missing and the
    command needs it."""
    missing = [] if needs_no_extra(argv) else missing_extra()
    if missing:
        print(
            f"dlfp-gateway bench needs the bench extra ({', '.join(missing)} is missing): "
            f"{INSTALL_EXTRA}",
            file=sys.stderr,
        )
        return 2
    from bench.commands import build_parser

    args = build_parser().parse_args(argv)
    return int(args.handler(args))
