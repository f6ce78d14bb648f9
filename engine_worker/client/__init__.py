"""The gateway process's side of vLLM: imported by the gateway (``gateway/engine.py``).

vLLM's ``AsyncLLM`` and everything the gateway uses of vLLM: engine arguments and
process environment, request translation and the request stream, templating and
tokenizing, grammar vetting, output parsers, the prompt's bounded prefix, the embedded
model, the start-up fit, device detection, CPU features, the tokenizer lock, and the
gateway's end of the channel to the engine core.
"""
