"""vLLM's engine-core process: imported there when vLLM resolves ``scheduler_cls``.

The scheduler hook (a subclass of vLLM's scheduler that sets the prefill cap), the order
a capped step serves prefills in, and the engine core's end of the gateway's channel.
Never imported by the gateway process (it names the scheduler by its path).
"""
