"""What the gateway and vLLM's processes share: imported by all of them.

The ``Engine`` protocol and its request and output types (``api``), the DLFP settings
(``dlfp_config``), their per-device defaults, the ``additional_config`` entry that carries
them to the engine core, the shared-memory ring of device step times, and the paths and
call names by which the gateway reaches the engine core and the workers
(``engine_hooks``). No vLLM import.
"""
