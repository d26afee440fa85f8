"""mrope inside other tools: :mod:`mrope.integrations.vllm` (a vLLM plugin)."""
