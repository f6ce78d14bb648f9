"""The DLFP controller: imported by the engine-core process (the scheduler hook).

The control laws, the online cost model of a step, the deadline plan's margin, the
host's share of a step, the step timeline and the controller's parameters. Standard
library only: no vLLM, pydantic or FastAPI import, so it runs and is tested anywhere.
"""
