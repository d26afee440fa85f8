"""One table used from several threads: each thread drives its own slots (admission, steps, removal)
and checks every position it gets. The numpy step's scratch and the pool are shared state: without
the table's lock, concurrent calls write each other's positions."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from mrope.serving import PositionTable
from support.engine import family
from support.strategies import Image, build_prompt, text

ROUNDS = 300


@pytest.fixture
def fast_switching():
    """Switch threads every few microseconds, so that calls interleave inside numpy sequences."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_threads_on_disjoint_slots(backend: str, dtype, fast_switching) -> None:
    fam = family("qwen2_vl")
    prompts = [build_prompt(fam, [text(3 + k), Image(2, 2 + 2 * k), text(2)]) for k in range(4)]
    expected = [fam.positions(p.input_ids, **p.kwargs()) for p in prompts]
    table = PositionTable(
        4, pool_capacity=8, dtype=dtype, backend="numpy" if dtype == np.float32 else backend
    )
    failures: list[str] = []
    start = threading.Barrier(2)

    def drive(slots: tuple[int, int]) -> None:
        out = np.zeros((3, 64), dtype=dtype)
        start.wait()
        for step in range(ROUNDS):
            for k in slots:
                if k in table:
                    table.remove(k)
                table.add(k, fam, prompts[k].input_ids, **prompts[k].kwargs())
            lengths = [len(prompts[k].input_ids) for k in slots]
            first = [step % n for n in lengths]  # a prompt chunk running past the prompt
            count = [n + 2 - f for n, f in zip(lengths, first, strict=True)]
            num = table.fill(out, np.array(slots), np.array(first), np.array(count))
            col = 0
            for k, f, c in zip(slots, first, count, strict=True):
                positions, delta = expected[k]
                want = np.concatenate(
                    [positions[:, f:], np.arange(positions.shape[1], f + c)[None].repeat(3, 0) + delta],
                    axis=1,
                )
                if not np.array_equal(out[:, col : col + c], want):
                    failures.append(f"slot {k}, step {step}: {out[:, col : col + c]} != {want}")
                col += c
            if num != col:
                failures.append(f"step {step}: N = {num}, expected {col}")
            decoded = table.decode(out, np.array(slots), np.array([n + 5 for n in lengths]))
            want = [n + 4 + expected[k][1] for k, n in zip(slots, lengths, strict=True)]
            if decoded != 2 or not np.array_equal(out[0, :2], want):
                failures.append(f"decode step {step}: {out[:, :2]} != {want}")
            if failures:
                return

    threads = [threading.Thread(target=drive, args=(slots,)) for slots in ((0, 1), (2, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
