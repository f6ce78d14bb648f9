"""DLFP's start-up settings in vLLM's ``additional_config``, left out of its compile hash.

vLLM keys its torch.compile, CUDA-graph and start-up caches on
``VllmConfig.compute_hash()``, which takes ``additional_config`` in: a dict through
``json.dumps``, any other value through its own ``compute_hash()`` (vLLM's
``SupportsHash``). With the DLFP settings in a dict, a new ITL objective or controller
at start would compile the model from cold on CUDA, though no DLFP setting changes the
model's graph.

``DLFPAdditionalConfig`` carries them instead: a read-only mapping, read as the dict was
(``read_dlfp_config`` below takes any mapping), whose ``compute_hash()`` hashes every entry
but DLFP's. vLLM's config validation accepts it as a ``SupportsHash`` and keeps it as it
is, and it pickles with the ``VllmConfig`` into the engine-core process (a plain class
of this package, which that process imports anyway for the scheduler).

It replaces the dict only when DLFP's entry is all it holds, once the ``VllmConfig``
exists. vLLM's own readers take a plain dict only: ``EngineArgs.create_engine_config``
writes the GDN and KDA backend flags into it by key, and those layers ignore anything
that is not a dict. So an operator's own ``additional_config`` keeps vLLM's dict, with
DLFP's settings hashed as before. Rejected: a dict subclass (vLLM hashes any dict
whole, and its validation copies a subclass to a plain dict) and an environment
variable (process-wide, and invisible to a scheduler built in-process).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from engine_worker.contract.dlfp_config import DLFPConfig

DLFP_KEY = "dlfp"
"""The entry holding the ``DLFPConfig`` as a dict."""


class DLFPAdditionalConfig(Mapping[str, Any]):
    """``additional_config`` whose hash, for vLLM's caches, leaves out the DLFP settings."""

    def __init__(self, entries: Mapping[str, Any]) -> None:
        self._entries = dict(entries)

    def __getitem__(self, key: str) -> Any:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._entries!r})"

    def compute_hash(self) -> str:
        """SHA-256 of the entries other than DLFP's, as JSON with sorted keys."""
        hashed = {key: value for key, value in self._entries.items() if key != DLFP_KEY}
        return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()


def exempt_dlfp_from_hash(additional_config: object) -> object:
    """The carrier for a dict holding DLFP's entry alone; anything else unchanged."""
    if isinstance(additional_config, dict) and set(additional_config) == {DLFP_KEY}:
        return DLFPAdditionalConfig(additional_config)
    return additional_config


def read_dlfp_config(additional_config: object) -> DLFPConfig:
    """The ``DLFPConfig`` in ``additional_config[DLFP_KEY]`` (a dict or a
    ``DLFPAdditionalConfig``), or the defaults."""
    raw = None
    if isinstance(additional_config, Mapping):
        raw = additional_config.get(DLFP_KEY)
    return DLFPConfig() if raw is None else DLFPConfig.model_validate(raw)
