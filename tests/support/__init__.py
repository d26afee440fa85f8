"""What the tests and benchmarks share: the peers and the family table (:mod:`.peers`), the prompt
generators (:mod:`.strategies`), the pure reference (:mod:`.reference`), the serving engine model
(:mod:`.engine`, :mod:`.snapshot`), tiny transformers VLMs (:mod:`.tiny_vlms`), vLLM's M-RoPE models
and their processors' prompt layouts outside an engine (:mod:`.vllm_models`), the tiny engine
checkpoints (:mod:`.checkpoints`) and the engines' drivers (:mod:`.vllm_harness`, :mod:`.sglang_engine`,
each also a subprocess worker run as a script). Not shipped: every environment ``make`` builds holds
``tests`` on its import path (a ``.pth`` file, see the Makefile), as pytest's ``pythonpath`` does, so the
tests, the engines' subprocesses and the benchmarks import it alike, with no ``sys.path`` edits."""
