"""mrope inside other tools: :mod:`mrope.integrations.vllm` (a vLLM plugin) and
:mod:`mrope.integrations.transformers` (a patch for transformers VLMs, positions for data pipelines)."""
