"""The render's backends against its numpy primitives (:mod:`mrope.render.numpy`): numba's lookup, run and
decode tail (:mod:`mrope.render.numba`), torch's lookup, render and tail (:mod:`mrope.render.torch`) on
arbitrary pool-like tables (keys ``base << 32 | start``, origins below the starts)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrope.core.segments import HW0, ORIGIN, START, T0, WIDTH
from mrope.render.numpy import find_segments, render_at, render_tail
from support.strategies import segment_data


@st.composite
def pools(draw):
    """(data (6, S) int64 with keys from 0 on, indices (N,) >= 0) in the pool's form: rows of
    mrope.core.segments, the START and ORIGIN rows offset by a base in the high 32 bits."""
    data = draw(segment_data())
    base = draw(st.integers(0, 3)) << 32
    data[START, 1:] += base
    data[ORIGIN, 1:] += base
    top = int(data[START, -1])
    index = np.array(draw(st.lists(st.integers(0, top + 5), max_size=30)), dtype=np.int64)
    return data, index


def numpy_positions(data, index):
    segment = find_segments(data[START], index)
    return segment, render_at(data, segment, index.copy(), np.empty((3, index.size), np.int64))


@settings(max_examples=200)
@given(pool=pools())
def test_numba_lookup_matches_numpy(pool):
    compiled = pytest.importorskip("mrope.render.numba", exc_type=ImportError)
    data, index = pool
    segment, _ = numpy_positions(data, index)
    found = [compiled.find_segment(data[START], i) for i in index.tolist()]
    np.testing.assert_array_equal(np.array(found, dtype=np.intp).reshape(-1), segment)


@given(index=st.integers(0, 2**32), count=st.integers(0, 6), delta=st.integers(-50, 50))
def test_numba_tail_matches_numpy(index, count, delta):
    compiled = pytest.importorskip("mrope.render.numba", exc_type=ImportError)
    out = np.zeros((3, count + 1), dtype=np.int64)
    assert compiled.render_tail(out, 1, count, index, delta) == count + 1
    expected = render_tail(
        np.empty((3, count), np.int64), np.arange(index, index + count, dtype=np.int64), delta
    )
    np.testing.assert_array_equal(out[:, 1:], expected)
    assert not out[:, 0].any()  # nothing before the column it was given


@settings(max_examples=200)
@given(pool=pools(), shift=st.sampled_from([None, 0.5]))
def test_torch_matches_numpy(pool, shift):
    torch = pytest.importorskip("torch")
    from mrope.render import torch as torch_backend

    data, index = pool
    segment, expected = numpy_positions(data, index)
    keys, table = torch.from_numpy(data[START]), torch.from_numpy(data)
    found = torch_backend.find_segments(keys, torch.from_numpy(index))
    np.testing.assert_array_equal(found.numpy(), segment)
    if shift is None:
        positions = torch_backend.render_at(table, found, torch.from_numpy(index))
    else:  # float rows apart (a float32 pool): float64 sums
        floats = data[[T0, HW0]].astype(np.float64) + shift
        positions = torch_backend.render_at(table, found, torch.from_numpy(index), torch.from_numpy(floats))
        expected = render_at(
            data, segment, index.copy(), np.empty((3, index.size), np.float32), floats=floats
        )
        positions = positions.to(torch.float32)
    np.testing.assert_array_equal(positions.numpy(), expected)


def test_torch_negative_control():
    """A table that differs in one field gives other positions: the comparison above can fail."""
    torch = pytest.importorskip("torch")
    from mrope.render import torch as torch_backend

    data = np.array([[0, 4], [0, 7], [0, 7], [1, 2], [1, 0], [0, 4]], dtype=np.int64)
    index = np.arange(8, dtype=np.int64)
    _, expected = numpy_positions(data, index)
    changed = data.copy()
    changed[WIDTH, 1] = 3
    segment = torch_backend.find_segments(torch.from_numpy(changed[START]), torch.from_numpy(index))
    positions = torch_backend.render_at(torch.from_numpy(changed), segment, torch.from_numpy(index))
    assert not np.array_equal(positions.numpy(), expected)


@given(index=st.lists(st.integers(0, 2**32), max_size=20), delta=st.integers(-50, 50))
def test_torch_tail_matches_numpy(index, delta):
    torch = pytest.importorskip("torch")
    from mrope.render import torch as torch_backend

    index = np.array(index, dtype=np.int64)
    expected = render_tail(np.empty((3, index.size), np.int64), index.copy(), delta)
    deltas = torch.full((index.size,), delta, dtype=torch.int64)
    np.testing.assert_array_equal(
        torch_backend.render_tail(torch.from_numpy(index), deltas).numpy(), expected
    )
    floats = torch_backend.render_tail(torch.from_numpy(index), deltas.to(torch.float64) + 0.5)
    assert floats.dtype == torch.float32
    np.testing.assert_array_equal(
        floats.numpy(), render_tail(np.empty((3, index.size), np.float32), index.copy(), delta + 0.5)
    )


# the primitives each backend module defines (mrope/render/__init__.py's table)
PRIMITIVES = {
    "numpy": ("find_segments", "render_at", "render_tail"),
    "numba": ("find_segment", "render_run", "render_tail"),
    "torch": ("find_segments", "render_at", "render_tail"),
    "triton": ("find_segment", "render_at"),
}


@pytest.mark.parametrize("backend", sorted(PRIMITIVES))
def test_each_backend_defines_the_primitives(backend):
    module = pytest.importorskip(f"mrope.render.{backend}", exc_type=ImportError)
    missing = [name for name in PRIMITIVES[backend] if not callable(getattr(module, name, None))]
    assert not missing, f"mrope.render.{backend} lacks {missing}"


def test_importing_render_imports_numpy_only():
    """``mrope.render`` (the table render, the choice of backend) loads no optional library: numba, torch
    and Triton are imported by their backend modules, on first need."""
    import subprocess
    import sys

    code = (
        "import sys, mrope.render, mrope.render.choose\n"
        "print(sorted(m for m in ('numba', 'torch', 'triton') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
