"""The worker extension under the path operators have given in ``DLFP_ENGINE_ARGS``.

vLLM resolves ``worker_extension_cls`` in each worker process; this name keeps
``engine_worker.worker_extension.DLFPWorkerExtension`` resolving to the class in
``worker.worker_extension``, and the engine treats both paths as its own extension.
"""

from __future__ import annotations

from engine_worker.worker.worker_extension import DLFPWorkerExtension

__all__ = ["DLFPWorkerExtension"]
