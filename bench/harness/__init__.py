"""In-process harnesses that build engine pieces themselves (the scheduler, the device
timer, a gateway on a made-up GPU model) rather than load a running endpoint."""
