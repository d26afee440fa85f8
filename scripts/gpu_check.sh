#!/usr/bin/env bash
# Every GPU check of mrope in one run, for a session that is lent a GPU (the device tool runs it from
# the repository root; results go to $OUT when set). Needs torch with CUDA, triton, numpy, pytest and
# hypothesis on that machine; transformers and liger-kernel for the comparisons when present.
# About 5 minutes: the rotary tests (compiled Triton kernel; tests/ops/test_rotary_cuda.py: no sync with
# check_positions=False, CUDA graph capture) and benchmark (Liger-Kernel), then the
# serving device path (sync-debug mode, CUDA graph replay, timings against host positions + copy), then
# vLLM Model Runner V2's step: vLLM's prepare_positions kernel against fill_ragged (8 / 64 / 256 requests), then
# the SGLang integration's decode: SGLang's per-request .item() loop against PositionTable.decode on the device.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench-results}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
export PYTHONPATH=src:tests TRITON_INTERPRET=0
python -m pytest -q tests/serving/test_device.py tests/serving/test_staging.py tests/serving/test_ragged.py tests/serving/test_rows.py tests/serving/test_table.py::test_the_triton_step_gives_any_integer_positions tests/ops tests/test_rotary.py 2>&1 | tee "$out/gpu-tests.txt"
python scripts/gpu_serving_bench.py 2>&1 | tee "$out/gpu-serving.md"
python scripts/gpu_v2_bench.py 2>&1 | tee "$out/gpu-v2.md"
python benchmarks/rotary.py --json "$out/rotary-gpu.json" 2>&1 | tee "$out/gpu-rotary.md"
python scripts/gpu_sglang_decode.py 2>&1 | tee "$out/gpu-sglang-decode.md"
