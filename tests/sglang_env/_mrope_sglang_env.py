"""Start-up hook of the SGLang test environment (``.venv-sglang``), installed into its site-packages by
``make`` with ``mrope_sglang_env.pth``, so that it acts in every Python process there (SGLang's
scheduler and detokenizer are processes of their own).

``sgl-kernel`` exists only as CUDA builds, yet SGLang imports it on its CPU paths. A finder on
``sys.meta_path`` serves ``sgl_kernel`` and every submodule as a stand-in module whose attributes are
stubs that raise when called; on a CPU without AMX nothing calls them (every layer takes its
``forward_native`` or plain torch path). Some SGLang model files look up
``torch.ops.sgl_kernel.<name>_cpu`` at import time: the first ``import sgl_kernel`` also makes that
namespace answer those names with stubs, except the ones SGLang probes with ``hasattr`` to choose fused
paths (:data:`PROBED`); every other name stays absent (SGLang registers fake kernels for the ops it
finds there).

Negative controls of the end-to-end tests: with ``MROPE_SGLANG_TEST_FAULT`` set, once mrope's SGLang
integration is imported, :class:`mrope.PositionTable`'s step calls (``fill``, ``decode``) in that process
are made faulty: ``wrong`` overwrites the h and w rows of what they wrote with the t row, ``raise``
raises :class:`FaultError`.

The torchvision fix-up (``torchvision::nms`` schemas) is the vLLM environment's
``_mrope_vllm_env``, installed beside this module.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

NAME = "sgl_kernel"
#: names SGLang tests with ``hasattr(torch.ops.sgl_kernel, ...)`` to choose a fused CPU kernel
PROBED = frozenset(
    {
        "fused_qk_norm_rope_cpu",
        "fused_qk_norm_cpu",
        "convert_weight_packed",
        "get_device_accessible_ptr",
        "gdn_attention",
    }
)


class StubError(RuntimeError):
    """A stand-in ``sgl_kernel`` function was called: this environment has no sgl-kernel."""


class _StubType(type):
    """The type of the stubs: a stub is a class (usable in annotations and ``isinstance``) whose
    attributes are stubs too and which raises when called."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise StubError(f"{cls.__qualname__} is a stand-in of the test environment (no sgl-kernel here)")


def _stub(qualname: str) -> Any:
    stub = _StubType(qualname.rpartition(".")[2], (), {"__qualname__": qualname})
    return stub


class _StubModule(types.ModuleType):
    """``sgl_kernel`` or one of its submodules: every missing attribute is a stub."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubOps:
    """``torch.ops.sgl_kernel``: the ``*_cpu`` names but :data:`PROBED` resolve to stubs."""

    def __getattr__(self, name: str) -> Any:
        if name in PROBED or not name.endswith("_cpu"):
            raise AttributeError(name)
        return _stub(f"torch.ops.sgl_kernel.{name}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []  # a package: submodules resolve through the finder
        module.__version__ = "0.0.0+mrope-stand-in"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == NAME:
            _stub_torch_ops()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != NAME and not fullname.startswith(NAME + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


def _stub_torch_ops() -> None:
    """Answer ``torch.ops.sgl_kernel.<name>`` with stubs (torch is imported by then: SGLang's callers)."""
    import torch

    torch.ops.sgl_kernel = _StubOps()


FAULT_VAR = "MROPE_SGLANG_TEST_FAULT"
FAULTS = ("wrong", "raise")
_FAULTED = "mrope.integrations.sglang"


class FaultError(RuntimeError):
    """The ``raise`` fault of a negative control."""


def install_fault(fault: str) -> None:
    """Make :class:`mrope.PositionTable`'s ``fill`` and ``decode`` faulty in this process (see above)."""
    if fault not in FAULTS:
        raise ValueError(f"{FAULT_VAR} must be one of {FAULTS}, got {fault!r}")
    from mrope import PositionTable

    def faulty(method: Any) -> Any:
        def step(self: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
            if fault == "raise":
                raise FaultError(f"{FAULT_VAR}=raise: PositionTable.{method.__name__}")
            result = method(self, out, *args, **kwargs)
            out[1:] = out[:1]
            return result

        return step

    PositionTable.fill = faulty(PositionTable.fill)
    PositionTable.decode = faulty(PositionTable.decode)


class _FaultLoader(importlib.abc.Loader):
    """The ordinary loader of the integration, then the fault."""

    def __init__(self, loader: Any, fault: str) -> None:
        self.loader, self.fault = loader, fault

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        install_fault(self.fault)


class _FaultFinder(importlib.abc.MetaPathFinder):
    def __init__(self, fault: str) -> None:
        self.fault = fault

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _FAULTED:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _FaultLoader(spec.loader, self.fault)
        return spec


def install() -> None:
    """Put the finders on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
    fault = os.environ.get(FAULT_VAR)
    if fault and _FAULTED not in sys.modules:
        sys.meta_path.insert(0, _FaultFinder(fault))


install()
