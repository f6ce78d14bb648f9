"""Device step times, from the workers to the scheduler: a ring in shared memory.

vLLM's ``ModelRunnerOutput`` has no field for a worker's own timing, and the
engine-core channel (``channel``) reaches the scheduler, not the workers, which
on CPU run in processes of their own (vLLM's CPU platform always takes the
multiprocessing executor). So the worker that times a step writes it here and
the scheduler reads it back by step index::

    slot(k) = k mod num_slots, holding (step_index, device_seconds)

The gateway process creates the segment at engine start and unlinks it at
shutdown (or when the start fails); the workers and the engine core only attach
to it by name. A slot is written once per step and read once, when the step
completes (``update_from_output``, after its output came back from the worker),
so a reader that finds another step's index in it (an older step never written,
or a newer one after a wrap) treats the time as missing rather than wrong.

NOTE: the writer stores the seconds before the index, and the reader checks the
index before the seconds and again after, so a slot caught mid-write reads as
missing, never as another step's time.

Pure Python: no vLLM import.
"""

from __future__ import annotations

import contextlib
import math
import struct
from multiprocessing import shared_memory

STEP_INDEX_ATTR = "dlfp_step_index"
"""The attribute the scheduler sets on each ``SchedulerOutput``: its step's index."""
NUM_SLOTS = 1024
"""Slots in the ring: steps in flight stay far below it (a batch queue holds 1 or 2)."""

_SLOT = struct.Struct("<qd")
"""One slot: the step index (-1 = never written) and the device seconds."""
_INDEX = struct.Struct("<q")
_SECONDS = struct.Struct("<d")


class StepRing:
    """A fixed ring of ``(step_index, device_seconds)`` slots in shared memory."""

    def __init__(self, memory: shared_memory.SharedMemory, num_slots: int, *, owner: bool) -> None:
        self._memory = memory
        self._num_slots = num_slots
        self._is_owner = owner

    @classmethod
    def create(cls, num_slots: int = NUM_SLOTS) -> StepRing:
        """A new ring with every slot unwritten (the caller must ``unlink`` it)."""
        if num_slots < 1:
            raise ValueError("num_slots must be >= 1")
        memory = shared_memory.SharedMemory(create=True, size=num_slots * _SLOT.size)
        ring = cls(memory, num_slots, owner=True)
        buf = ring._buffer()
        for slot in range(num_slots):
            _SLOT.pack_into(buf, slot * _SLOT.size, -1, math.nan)
        return ring

    @classmethod
    def attach(cls, name: str, num_slots: int = NUM_SLOTS) -> StepRing:
        """The ring another process created (``FileNotFoundError`` if it is gone).

        NOTE: an attaching process never unlinks: vLLM's engine core and workers are
        children of the gateway and share its resource tracker, where the segment is
        registered once, so only the creator's ``unlink`` removes it.
        """
        memory = shared_memory.SharedMemory(name=name)
        if memory.size < num_slots * _SLOT.size:
            memory.close()
            raise ValueError(f"shared memory {name!r} holds fewer than {num_slots} slots")
        return cls(memory, num_slots, owner=False)

    @property
    def name(self) -> str:
        return self._memory.name

    @property
    def num_slots(self) -> int:
        return self._num_slots

    def write(self, step_index: int, device_s: float) -> None:
        offset = (step_index % self._num_slots) * _SLOT.size
        buf = self._buffer()
        _INDEX.pack_into(buf, offset, -1)  # mid-write: the slot reads as missing
        _SECONDS.pack_into(buf, offset + _INDEX.size, device_s)
        _INDEX.pack_into(buf, offset, step_index)

    def read(self, step_index: int) -> float | None:
        """Step ``step_index``'s device seconds, or None if its slot holds another step."""
        offset = (step_index % self._num_slots) * _SLOT.size
        buf = self._buffer()
        if _INDEX.unpack_from(buf, offset)[0] != step_index:
            return None
        (device_s,) = _SECONDS.unpack_from(buf, offset + _INDEX.size)
        if _INDEX.unpack_from(buf, offset)[0] != step_index:
            return None
        return float(device_s) if math.isfinite(device_s) and device_s >= 0 else None

    def _buffer(self) -> memoryview:
        buf = self._memory.buf
        if buf is None:
            raise ValueError("the step ring is closed")
        return buf

    def close(self) -> None:
        """Detach this process; the creator also removes the segment."""
        try:
            self._memory.close()
        finally:
            if self._is_owner:
                self._is_owner = False
                with contextlib.suppress(FileNotFoundError):
                    self._memory.unlink()
