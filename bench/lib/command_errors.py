"""How a ``bench`` command that runs trials ends when they cannot run or are stopped.

A refused endpoint or a bad option ends the command with one line and status 2; Ctrl-C
ends it with one line saying what is kept (a rerun resumes from it) and status 130. No
traceback in either case.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench.lib.endpoint import EndpointError

USAGE_STATUS = 2
INTERRUPTED_STATUS = 130


def run_guarded(command: str, kept: str, work: Callable[[], object]) -> int | None:
    """Run ``work`` for ``command`` (``bench sweep``); None once it is done, else the
    command's exit status, after one line on stderr. ``kept`` names what an interrupted
    run leaves behind (``finished trials``)."""
    try:
        work()
    except (EndpointError, ValueError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return USAGE_STATUS
    except KeyboardInterrupt:
        print(f"{command}: interrupted; {kept} are kept, rerun to resume", file=sys.stderr)
        return INTERRUPTED_STATUS
    return None
