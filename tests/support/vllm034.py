"""vLLM 0.34.0 on this CPU machine, for ``tests/integrations/vllm034`` (see ``make test-vllm034``).

vLLM 0.34.0 has no CPU wheel: its Python source (``make vllm034-src`` extracts the pinned sdist's
``vllm/`` and ``csrc/cpu/`` into :func:`source_root`) runs on vLLM 0.32's environment with
``PYTHONPATH`` on that root. Two pieces of a real 0.34 install are missing there, and this module
supplies them without touching vLLM's code:

- its C++ op ``torch.ops._C.prepare_mrope_positions_cpu`` (the CPU runner's M-RoPE step), compiled
  from the release's own ``csrc/cpu/input_batch.cpp`` and registered with the schema of its
  ``csrc/cpu/torch_bindings.cpp`` (:func:`load_prepare_mrope_positions`);
- pinned host memory and UVA views, which Model Runner V2's GPU ``RopeState`` allocates
  (:func:`uva_on_cpu`: pinned buffers become ordinary CPU tensors and a "device view" shares their
  memory, as a UVA view does), so that its Triton kernels run in Triton's interpreter on CPU tensors
  (the environment's start-up hook sets ``TRITON_INTERPRET=1`` before vLLM is imported).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

VERSION = "0.34.0"
#: the folder holding 0.34's ``vllm/`` and ``csrc/cpu/`` (default: where ``make vllm034-src`` puts them)
ROOT_ENV = "MROPE_VLLM034_ROOT"
#: where the compiled op is kept between runs (default: a folder in the running environment)
BUILD_ENV = "MROPE_VLLM034_BUILD"
REPO = Path(__file__).resolve().parents[2]
OP = "prepare_mrope_positions_cpu"
_EXTENSION = "mrope_vllm034_cpu_ops"


def source_root() -> Path:
    """vLLM 0.34.0's source root: ``$MROPE_VLLM034_ROOT``, else ``<repo>/.venv-vllm/vllm-0.34.0``."""
    return Path(os.environ.get(ROOT_ENV) or REPO / ".venv-vllm" / f"vllm-{VERSION}")


def build_dir() -> Path:
    """The op's build folder: ``$MROPE_VLLM034_BUILD``, else ``<sys.prefix>/mrope-build/vllm-0.34.0``
    (kept with the environment, so that later runs reuse the build)."""
    return Path(os.environ.get(BUILD_ENV) or Path(sys.prefix) / "mrope-build" / f"vllm-{VERSION}")


def missing_reason() -> str | None:
    """Why vLLM 0.34.0's source cannot serve the tests here (None: it can). Nothing is imported: the
    ``vllm`` found on ``sys.path`` must be 0.34.0 by its ``_version.py`` and hold the CPU runner's
    ``rope.py``, and :func:`source_root` must hold ``csrc/cpu/input_batch.cpp``."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return "no vllm package on sys.path"
    package = Path(next(iter(spec.submodule_search_locations)))
    version = _version(package / "_version.py")
    if version != VERSION:
        return f"the vllm on sys.path ({package}) is {version or 'of unknown version'}, not {VERSION}"
    if not (package / "v1" / "worker" / "cpu" / "rope.py").is_file():
        return f"{package} has no v1/worker/cpu/rope.py"
    source = source_root() / "csrc" / "cpu" / "input_batch.cpp"
    if not source.is_file():
        return f"{source} is missing (make vllm034-src, or set {ROOT_ENV})"
    return None


def _version(path: Path) -> str | None:
    """``__version__`` of a ``_version.py``, read without importing it."""
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if "__version__" in names and isinstance(node.value.value, str):
                return node.value.value.split("+")[0]
    return None


# -- the C++ op ---------------------------------------------------------------------------------------
def op_schema(root: Path | None = None, name: str = OP) -> str:
    """The schema vLLM registers for ``_C::<name>``, read from ``csrc/cpu/torch_bindings.cpp`` (the
    string literals of its ``ops.def("...", &cpu_utils::<name>)``, joined as the compiler joins them)."""
    text = ((root or source_root()) / "csrc" / "cpu" / "torch_bindings.cpp").read_text("utf-8")
    found = re.search(
        r"ops\.def\(\s*((?:\"(?:[^\"\\]|\\.)*\"\s*)+),\s*&cpu_utils::" + re.escape(name) + r"\s*\)", text
    )
    if found is None:
        raise LookupError(f"no ops.def of {name} in torch_bindings.cpp")
    return "".join(ast.literal_eval(piece) for piece in re.findall(r"\"(?:[^\"\\]|\\.)*\"", found.group(1)))


#: stands for vLLM's ``cpu_types.hpp`` (SIMD vector types per ISA, which ``input_batch.cpp`` does not use)
_CPU_TYPES_STAND_IN = """\
// Stand-in for vLLM's csrc/cpu/cpu_types.hpp: input_batch.cpp needs only torch's tensor API.
#pragma once
#include <torch/all.h>
"""

_BINDINGS = """\
// vLLM's csrc/cpu/input_batch.cpp, unmodified (copied beside the stand-in cpu_types.hpp), and the one
// registration of csrc/cpu/torch_bindings.cpp that its M-RoPE step needs.
#include <torch/library.h>

#include "input_batch.cpp"

TORCH_LIBRARY_FRAGMENT(_C, m) {{
  m.def({schema}, &cpu_utils::{name});
}}
"""


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (an unchanged mtime keeps ninja's build)."""
    if not path.is_file() or path.read_text("utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _registered(name: str = OP) -> Any | None:
    import torch

    try:
        return getattr(torch.ops._C, name)
    except (AttributeError, RuntimeError):
        return None


def load_prepare_mrope_positions(root: Path | None = None, build: Path | None = None) -> Any:
    """``torch.ops._C.prepare_mrope_positions_cpu``, compiled from vLLM 0.34's own
    ``csrc/cpu/input_batch.cpp`` with ``torch.utils.cpp_extension`` and registered with vLLM's
    schema (TORCH_LIBRARY_FRAGMENT(_C, m)), so that ``vllm._cpu_ops`` and 0.34's CPU ``RopeState``
    call it unmodified. The build is kept in :func:`build_dir` (a minute the first time, then ninja
    finds nothing to do); an op already registered in this process is returned as it is."""
    existing = _registered()
    if existing is not None:
        return existing
    from torch.utils import cpp_extension

    root = root or source_root()
    build = build or build_dir()
    build.mkdir(parents=True, exist_ok=True)
    source = (root / "csrc" / "cpu" / "input_batch.cpp").read_text("utf-8")
    schema = op_schema(root)
    _write_if_changed(build / "input_batch.cpp", source)
    _write_if_changed(build / "cpu_types.hpp", _CPU_TYPES_STAND_IN)
    _write_if_changed(build / "ops.cpp", _BINDINGS.format(schema=f'"{schema}"', name=OP))
    # the environment's ninja (pip's) first, without changing this process's PATH for good
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), path])
    try:
        cpp_extension.load(
            name=_EXTENSION,
            sources=[str(build / "ops.cpp")],
            extra_include_paths=[str(build)],
            extra_cflags=["-O2"],
            build_directory=str(build),
            is_python_module=False,
            verbose=False,
        )
    finally:
        os.environ["PATH"] = path
    op = _registered()
    if op is None:
        raise RuntimeError(f"{_EXTENSION} loaded but torch.ops._C.{OP} is not registered")
    return op


# -- pinned memory and UVA on the CPU -------------------------------------------------------------------
class _PinlessTorch:
    """``torch`` as one module sees it, except that ``zeros(..., pin_memory=True)`` returns an
    ordinary CPU tensor (this torch has no pinned-memory allocator); counts those requests."""

    def __init__(self, torch: ModuleType) -> None:
        self._torch = torch
        self.pinned_requests = 0

    def zeros(self, *args: Any, pin_memory: bool = False, **kwargs: Any) -> Any:
        if pin_memory:
            self.pinned_requests += 1
        return self._torch.zeros(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)


class UvaStandIn:
    """What :func:`uva_on_cpu` patched: ``pinned_requests`` (pinned allocations served by ordinary
    CPU tensors) and ``views`` (UVA views handed out), so that a test can tell the UVA path ran."""

    def __init__(self, torch_view: _PinlessTorch) -> None:
        self._torch_view = torch_view
        self.views = 0

    @property
    def pinned_requests(self) -> int:
        return self._torch_view.pinned_requests

    def view(self, cpu_tensor: Any) -> Any:
        """A "device view" of a host tensor: a second tensor on the same memory, as UVA gives."""
        self.views += 1
        return cpu_tensor.view(cpu_tensor.shape)


@contextlib.contextmanager
def uva_on_cpu() -> Iterator[UvaStandIn]:
    """vLLM 0.34's ``vllm.v1.worker.gpu.buffer_utils`` taking its UVA path on CPU tensors, for the
    duration: ``is_uva_available()`` true, ``pin_memory=True`` allocations plain CPU tensors, and
    ``get_accelerator_view_from_cpu_tensor`` a view on the same memory. Only that module's names are
    patched, and put back on exit."""
    import torch
    from vllm.v1.worker.gpu import buffer_utils

    stand_in = UvaStandIn(_PinlessTorch(torch))
    patches = {
        "is_uva_available": lambda: True,
        "get_accelerator_view_from_cpu_tensor": stand_in.view,
        "torch": stand_in._torch_view,
    }
    saved = {name: getattr(buffer_utils, name) for name in patches}
    for name, value in patches.items():
        setattr(buffer_utils, name, value)
    try:
        yield stand_in
    finally:
        for name, value in saved.items():
            setattr(buffer_utils, name, value)
