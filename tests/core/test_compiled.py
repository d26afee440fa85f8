"""The numba backend's scan (:func:`mrope.core.compiled.nth_placeholders`) against numpy, and how the
backend is loaded (:func:`mrope._backends.compiled_kernel`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mrope.core.blocks import item_bounds, locate_few, starts_if_consecutive
from support.peers import require_module

require_module("numba")

from mrope.core.compiled import nth_placeholders  # noqa: E402

TOKEN, STOP = 7, 9


@given(
    ids=st.lists(st.sampled_from([0, 1, TOKEN, TOKEN, TOKEN, STOP]), max_size=80),
    ranks=st.lists(st.integers(0, 85), max_size=8).map(sorted),
)
def test_nth_placeholders_is_numpys_flatnonzero_at_the_ranks(ids, ranks):
    """Each rank's stream index (ranks past the last placeholder left as they were, repeated ranks
    each written) and the count; -1 as soon as the stop token appears."""
    array = np.array(ids, dtype=np.int64)
    got = np.array(ranks, dtype=np.int64)
    count = nth_placeholders(array, TOKEN, STOP, got)
    if STOP in ids:
        assert count == -1
        return
    index = np.flatnonzero(array == TOKEN)
    assert count == index.size
    expected = [int(index[r]) if r < index.size else r for r in ranks]
    assert got.tolist() == expected


@given(
    ids=st.lists(st.sampled_from([0, TOKEN, TOKEN]), max_size=40),
    tokens=st.lists(st.integers(1, 6), min_size=1, max_size=4),
)
def test_the_compiled_scan_locates_items_as_locate_few(ids, tokens):
    """The items' first placeholders from the compiled scan, checked by :func:`starts_if_consecutive`,
    are :func:`locate_few`'s over numpy's placeholder index (None alike)."""
    array = np.array(ids, dtype=np.int64)
    bounds = np.array(item_bounds(tokens), dtype=np.int64)
    count = nth_placeholders(array, TOKEN, -1, bounds)
    got = starts_if_consecutive(bounds.tolist(), tokens) if count == sum(tokens) else None
    assert got == locate_few(np.flatnonzero(array == TOKEN), tokens)


def test_a_short_call_never_loads_the_compiled_backend():
    """``compiled_kernel(..., load=False)`` is None until something loads numba's backend (a fresh
    process: nothing has), the kernel afterwards; None under ``MROPE_NUMBA=0`` whatever is loaded, which
    mrope reads once per process (again after ``read_numba_env_again()``)."""
    code = (
        "import sys, os\n"
        "from mrope._backends import compiled_kernel, read_numba_env_again\n"
        "assert compiled_kernel('nth_placeholders', load=False) is None\n"
        "assert 'numba' not in sys.modules\n"
        "assert compiled_kernel('nth_placeholders') is not None\n"
        "assert compiled_kernel('nth_placeholders', load=False) is not None\n"
        "os.environ['MROPE_NUMBA'] = '0'\n"
        "assert compiled_kernel('nth_placeholders') is not None  # read once per process\n"
        "read_numba_env_again()\n"
        "assert compiled_kernel('nth_placeholders') is None\n"
        "assert compiled_kernel('nth_placeholders', load=False) is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
