"""The numba backend's scan (:func:`mrope.render.numba.item_starts`) against numpy's
(:func:`mrope.core.blocks.locate_few`), and how the backend is loaded
(:func:`mrope.render.choose.compiled_kernel`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from mrope.core.blocks import locate_few
from support.peers import require_module

require_module("numba")

from mrope.render.numba import item_starts, item_starts_int64  # noqa: E402

TOKEN, STOP = 7, 9


def _scan(ids: list[int], tokens: list[int], dtype: type) -> list[int] | None:
    array = np.array(ids, dtype=dtype)
    starts = np.array(tokens, dtype=np.int64)
    scan = item_starts_int64 if dtype is np.int64 else item_starts  # (others: numba's dispatcher)
    return starts.tolist() if scan(array, TOKEN, STOP, starts) else None


@given(
    ids=st.lists(st.sampled_from([0, TOKEN, TOKEN]), max_size=40),
    tokens=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    dtype=st.sampled_from([np.int64, np.int32]),
)
@example(ids=[TOKEN, 0, TOKEN], tokens=[2], dtype=np.int64)  # the count fits, the run does not
@example(ids=[TOKEN, TOKEN, TOKEN], tokens=[1, 2], dtype=np.int64)  # two items back to back
def test_the_compiled_scan_locates_items_as_locate_few(ids, tokens, dtype):
    """Each item's first placeholder where every item's placeholders are consecutive and none are left
    over, as :func:`locate_few` finds them over numpy's placeholder index (None alike)."""
    expected = locate_few(np.flatnonzero(np.array(ids) == TOKEN), tokens)
    assert _scan(ids, tokens, dtype) == expected


@given(ids=st.lists(st.sampled_from([0, TOKEN]), max_size=20), at=st.integers(0, 20))
def test_the_compiled_scan_stops_at_the_refused_token(ids, at):
    ids = ids[:at] + [STOP] + ids[at:]
    assert _scan(ids, [1], np.int64) is None


def test_a_short_call_never_loads_the_compiled_backend():
    """``compiled_kernel(..., load=False)`` is None until something loads numba's backend (a fresh
    process: nothing has), the kernel afterwards; None under ``MROPE_NUMBA=0`` whatever is loaded, which
    mrope reads once per process (again after ``read_numba_env_again()``)."""
    code = (
        "import sys, os\n"
        "from mrope.render.choose import compiled_kernel, read_numba_env_again\n"
        "assert compiled_kernel('item_starts', load=False) is None\n"
        "assert 'numba' not in sys.modules\n"
        "assert compiled_kernel('item_starts') is not None\n"
        "assert compiled_kernel('item_starts', load=False) is not None\n"
        "os.environ['MROPE_NUMBA'] = '0'\n"
        "assert compiled_kernel('item_starts') is not None  # read once per process\n"
        "read_numba_env_again()\n"
        "assert compiled_kernel('item_starts') is None\n"
        "assert compiled_kernel('item_starts', load=False) is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
