"""mrope's two backends of its short paths, chosen for a block of a test: the numba backend loaded, or
``MROPE_NUMBA=0`` (numpy), which mrope reads once per process (read again on entry and on exit)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from mrope.render.choose import NUMBA_ENV, read_numba_env_again

from .peers import require_module

#: the backends a short path (the placeholder scan, the one-row render) may take
BACKENDS = ("compiled", "numpy")


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Within the block, mrope's short paths take ``name``: ``"compiled"`` (its numba backend loaded)
    or ``"numpy"`` (``MROPE_NUMBA=0``)."""
    if name == "compiled":
        require_module("numba")
        import mrope.render.numba  # noqa: F401  (loads the backend: the short paths then take it)

        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NUMBA_ENV, "0")
        read_numba_env_again()
        try:
            yield
        finally:
            patch.undo()
            read_numba_env_again()
