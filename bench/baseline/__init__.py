"""The vLLM baseline: vLLM's own OpenAI server, and vLLM's benchmark client run beside
this harness's to cross-check its timing."""
