# Set-up and checks; each target creates what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch that lies on this machine's disk; a looser pin pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
SGLANG := sglang==0.5.23

.PHONY: venv test lint bench bench-prefill bench-step bench-rotary clean

$(BIN)/.installed: pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[test]' $(TORCH)
	# SGLang's position code imports only torch: install the package without its GPU stack.
	$(BIN)/pip install -q --no-deps $(SGLANG)
	touch $@

venv: $(BIN)/.installed

lint: venv
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

test: venv lint
	$(BIN)/python -m pytest

bench: venv
	$(BIN)/mrope bench step --json bench-results/step.json
	$(BIN)/mrope bench prefill --json bench-results/prefill.json
	$(MAKE) bench-vllm-step

# The step benchmark again in the vLLM environment, beside vLLM's own _calc_mrope_positions ("vllm").
bench-vllm-step:
	@if [ -x .venv-vllm/bin/mrope ]; then .venv-vllm/bin/mrope bench step --json bench-results/step-vllm.json; \
	else echo "bench-vllm-step: no .venv-vllm (make venv-vllm creates it), skipped"; fi

bench-step: venv
	$(BIN)/mrope bench step --json bench-results/step.json

bench-prefill: venv
	$(BIN)/mrope bench prefill --json bench-results/prefill.json

bench-rotary: venv
	$(BIN)/mrope bench rotary --json bench-results/rotary.json

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache .hypothesis bench-results
