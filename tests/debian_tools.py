"""Debian programs the tests drive (Chromium, promtool, redis-server), installed with apt-get where
missing, so a fresh CI machine has them too; no other download.

All of them are provisioned at once, with one ``apt-get update`` and one
``apt-get install``, by the session fixture ``debian_programs`` (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PACKAGES = {"chromium": "chromium", "promtool": "prometheus", "redis-server": "redis-server"}
"""Each program the tests run, and the Debian package that installs it."""


def provision() -> dict[str, str | None]:
    """Each program's path (None where nothing could install it), installing the missing
    ones first. A failed install fails the test; no apt-get (or not root) leaves them None.
    """
    missing = [exe for exe in PACKAGES if shutil.which(exe) is None]
    apt = shutil.which("apt-get")
    if missing and apt is not None and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        packages = [PACKAGES[exe] for exe in missing]
        for args in (["update"], ["install", "-y", "--no-install-recommends", *packages]):
            done = subprocess.run(
                [apt, *args], env=env, capture_output=True, text=True, timeout=1200
            )
            if done.returncode != 0:
                pytest.fail(f"apt-get {' '.join(args)} failed:\n{done.stderr[-2000:]}")
        for exe in missing:
            assert shutil.which(exe), f"Debian's {PACKAGES[exe]} package installed no {exe}"
    return {exe: shutil.which(exe) for exe in PACKAGES}


class DebianPrograms:
    """The provisioned programs; ``path(name)`` skips a test only where apt-get (as root)
    is unavailable to install the program it needs."""

    def __init__(self, found: dict[str, str | None]) -> None:
        self._found = found

    def path(self, executable: str) -> str:
        found = self._found[executable]
        if found is None:
            pytest.skip(f"{executable} is missing and apt-get (as root) cannot install it")
        return found
