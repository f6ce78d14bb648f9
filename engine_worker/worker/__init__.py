"""vLLM's worker processes: imported there when vLLM resolves ``worker_extension_cls``.

The gateway's worker extension and what it installs: the device step timer, the CPU
pipeline's receive buffer and the seeded-sampling guard. Never imported by the gateway
process (it names the extension by its path).
"""
