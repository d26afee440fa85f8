"""What the tests and benchmarks share: the peers and the family table (:mod:`.peers`), the prompt
generators (:mod:`.strategies`), the pure reference (:mod:`.reference`), the serving engine model
(:mod:`.engine`, :mod:`.snapshot`) and tiny transformers VLMs (:mod:`.tiny_vlms`). Not installed: pytest
finds it on its ``pythonpath`` (``tests``), the benchmarks through ``benchmarks/_common.py``."""
