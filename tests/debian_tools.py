"""Debian programs the tests drive (Chromium, promtool), installed with apt-get where
missing, so a fresh CI machine has them too; no other download."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def debian_tool(executable: str, package: str) -> str:
    """The path of ``executable``, installing Debian's ``package`` first if needed.

    Skips only where nothing can install it (no apt-get, or not root); a failed
    install fails the test.
    """
    found = shutil.which(executable)
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.skip(f"{executable} is missing and apt-get (as root) is unavailable to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["update"], ["install", "-y", "--no-install-recommends", package]):
        done = subprocess.run([apt, *args], env=env, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            pytest.fail(f"apt-get {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    found = shutil.which(executable)
    assert found, f"Debian's {package} package installed no {executable}"
    return found
