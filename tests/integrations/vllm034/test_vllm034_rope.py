"""vLLM 0.34.0's two M-RoPE states, unmodified, on this CPU.

- ``prepare_mrope_positions_cpu`` (``csrc/cpu/input_batch.cpp``, compiled here) against a numpy
  statement of what it does, on random batches, with mutated statements as negative controls;
- the CPU runner's ``RopeState`` (``vllm/v1/worker/cpu/rope.py``, which calls that op) end to end:
  admissions through ``init_prefill_positions`` from a stand-in model, chunked prefill and decode
  steps through ``prepare_positions``, read back with ``get_positions``;
- Model Runner V2's GPU ``RopeState`` (``vllm/v1/worker/gpu/mm/rope.py``: staged writes and its
  Triton step kernel, in Triton's interpreter on CPU tensors, pinned and UVA memory stood in by
  :func:`support.vllm034.uva_on_cpu`) giving the same positions step for step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from support import vllm034

MAX_NUM_REQS = 4
MAX_NUM_TOKENS = 16
MAX_MODEL_LEN = 48
SENTINEL = -7


# -- the op against its semantics -------------------------------------------------------------------------
def reference(
    positions: np.ndarray,
    prefill_positions: np.ndarray,
    prefill_delta: np.ndarray,
    idx_mapping: np.ndarray,
    query_start_loc: np.ndarray,
    prefill_lens: np.ndarray,
    num_computed: np.ndarray,
) -> np.ndarray:
    """What ``prepare_mrope_positions_cpu`` writes, in numpy: for the request in batch slot ``b`` (state
    row ``r = idx_mapping[b]``, ``c = num_computed[r]`` tokens done), the first
    ``min(query_len, max(prefill_lens[r] - c, 0))`` tokens of its query take its stored prompt positions
    from column ``c`` on (rows ``r * num_dims ...``), the others ``c + index + prefill_delta[r]``, on every
    row; columns outside the queries keep their values."""
    out = positions.copy()
    num_dims = out.shape[0]
    for b, r in enumerate(idx_mapping):
        start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        c = int(num_computed[r])
        prompt = min(end - start, max(int(prefill_lens[r]) - c, 0))
        stored = prefill_positions[r * num_dims : (r + 1) * num_dims]
        out[:, start : start + prompt] = stored[:, c : c + prompt]
        out[:, start + prompt : end] = c + np.arange(prompt, end - start) + int(prefill_delta[r])
    return out


Inputs = dict[str, np.ndarray]


def _no_delta(inputs: Inputs) -> Inputs:
    """Near miss: decode positions without the request's delta."""
    return {**inputs, "prefill_delta": 0 * inputs["prefill_delta"]}


def _column_off_by_one(inputs: Inputs) -> Inputs:
    """Near miss: prompt positions read one column late."""
    return {**inputs, "prefill_positions": np.roll(inputs["prefill_positions"], -1, axis=1)}


def _rows_reversed(inputs: Inputs) -> Inputs:
    """Near miss: each request's rows (t, h, w, ...) in the wrong order."""
    rows = inputs["positions"].shape[0]
    stored = inputs["prefill_positions"].reshape(MAX_NUM_REQS, rows, MAX_MODEL_LEN)[:, ::-1]
    return {**inputs, "prefill_positions": np.ascontiguousarray(stored.reshape(-1, MAX_MODEL_LEN))}


def _whole_query_prompt(inputs: Inputs) -> Inputs:
    """Near miss: a query that starts in the prompt is all prompt (the GPU kernel's rule; vLLM's scheduler
    never runs a query past the prompt's end, but the op's contract covers it)."""
    lens, computed, qsl = inputs["prefill_lens"].copy(), inputs["num_computed"], inputs["query_start_loc"]
    for b, r in enumerate(inputs["idx_mapping"]):
        if computed[r] < lens[r]:
            lens[r] = max(lens[r], computed[r] + qsl[b + 1] - qsl[b])
    return {**inputs, "prefill_lens": lens}


MUTANTS: tuple[Callable[[Inputs], Inputs], ...] = (
    _no_delta,
    _column_off_by_one,
    _rows_reversed,
    _whole_query_prompt,
)


def random_batch(rng: np.random.Generator, num_dims: int) -> Inputs:
    """The op's inputs for a random batch: some requests in prefill (chunks that may run past the prompt's
    end), some decoding, state rows in a random order, a sentinel-filled output."""
    batch = int(rng.integers(1, MAX_NUM_REQS + 1))
    idx_mapping = rng.permutation(MAX_NUM_REQS)[:batch].astype(np.int64)
    prefill_lens = rng.integers(0, MAX_MODEL_LEN + 1, MAX_NUM_REQS).astype(np.int32)
    num_computed = rng.integers(0, MAX_MODEL_LEN, MAX_NUM_REQS).astype(np.int32)
    query_lens = [int(rng.integers(0, min(8, MAX_MODEL_LEN - num_computed[r]) + 1)) for r in idx_mapping]
    query_start_loc = np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)
    return {
        "positions": np.full((num_dims, MAX_NUM_TOKENS * 2 + 1), SENTINEL, dtype=np.int64),
        "prefill_positions": rng.integers(
            -(2**30), 2**30, (MAX_NUM_REQS * num_dims, MAX_MODEL_LEN), dtype=np.int64
        ).astype(np.int32),
        "prefill_delta": rng.integers(-1000, 1000, MAX_NUM_REQS).astype(np.int32),
        "idx_mapping": idx_mapping,
        "query_start_loc": query_start_loc,
        "prefill_lens": prefill_lens,
        "num_computed": num_computed,
    }


def run_op(op: Any, inputs: Inputs, strided: bool) -> np.ndarray:
    """The op on ``inputs``; with ``strided`` it writes into every other column of a wider buffer (it
    must follow the output's strides), whose other columns must keep the sentinel."""
    rows, columns = inputs["positions"].shape
    buffer = torch.full((rows, 2 * columns if strided else columns), SENTINEL, dtype=torch.int64)
    positions = buffer[:, ::2] if strided else buffer
    op(positions, *(torch.from_numpy(inputs[name]) for name in list(inputs)[1:]))
    if strided:
        assert bool((buffer[:, 1::2] == SENTINEL).all())
    return positions.numpy()


@pytest.mark.parametrize("num_dims", [3, 4])
def test_op_equals_its_semantics_on_random_batches(prepare_op: Any, num_dims: int) -> None:
    rng = np.random.default_rng(num_dims)
    mutants_caught = {mutant.__name__: False for mutant in MUTANTS}
    for case in range(60):
        inputs = random_batch(rng, num_dims)
        expected = reference(**inputs)
        got = run_op(prepare_op, inputs, strided=bool(case % 2))
        np.testing.assert_array_equal(got, expected, err_msg=f"case {case}")
        for mutant in MUTANTS:
            mutants_caught[mutant.__name__] |= not np.array_equal(reference(**mutant(inputs)), got)
    # the random batches tell the op's rule from each near miss of it
    assert all(mutants_caught.values()), mutants_caught


def test_op_has_the_schema_vllm_calls_it_with(prepare_op: Any) -> None:
    import inspect

    from vllm import _cpu_ops

    schema = prepare_op.default._schema
    assert str(schema) == "_C::" + vllm034.op_schema()
    # vLLM's Python wrapper passes its arguments in the schema's order, the first written in place
    wrapper = list(inspect.signature(_cpu_ops.prepare_mrope_positions_cpu).parameters)
    assert [a.name for a in schema.arguments] == wrapper
    assert [bool(a.alias_info and a.alias_info.is_write) for a in schema.arguments] == [True] + [False] * 6
    assert vllm034.load_prepare_mrope_positions() is prepare_op  # registered once per process


# -- the two RopeStates end to end ---------------------------------------------------------------------------
class PositionsModel:
    """A stand-in for an M-RoPE model: ``get_mrope_input_positions`` returns the positions and delta it
    was built with (what a Qwen-style model computes from a prompt's tokens and features)."""

    def __init__(self, positions: torch.Tensor, delta: int) -> None:
        self.positions, self.delta = positions, delta
        self.calls: list[tuple[list[int], list]] = []

    def get_mrope_input_positions(
        self, input_tokens: list[int], mm_features: list
    ) -> tuple[torch.Tensor, int]:
        self.calls.append((list(input_tokens), mm_features))
        return self.positions, self.delta


def qwen_style_positions(
    before: int, grid: tuple[int, int], after: int, start: int = 0
) -> tuple[np.ndarray, int]:
    """Positions (3, L) of ``before`` text tokens, an image of ``grid`` (h, w) merged tokens, ``after``
    text tokens (text resumes after the image's largest id), and the prompt's delta."""
    h, w = grid
    text = np.arange(start, start + before)
    base = start + before
    hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    image = np.stack([np.zeros(h * w, dtype=np.int64), hh.ravel(), ww.ravel()]) + base
    resume = int(image.max()) + 1
    tail = np.arange(resume, resume + after)
    positions = np.concatenate([np.tile(text, (3, 1)), image, np.tile(tail, (3, 1))], axis=1)
    return positions, int(positions.max()) + 1 - positions.shape[1]


#: (slot, positions, delta) of the requests admitted: two image prompts and a text prompt
def requests() -> list[tuple[int, np.ndarray, int]]:
    image_a, delta_a = qwen_style_positions(3, (3, 4), 5)
    image_b, delta_b = qwen_style_positions(6, (2, 2), 2)
    text = np.tile(np.arange(9), (3, 1))
    return [(2, image_a, delta_a), (0, image_b, delta_b), (3, text, 0)]


def expected_positions(positions: np.ndarray, delta: int, start: int, count: int) -> np.ndarray:
    """A request's positions for tokens ``start ... start + count - 1``: its prompt's, then
    ``index + delta`` on every row (decode M-RoPE is plain RoPE)."""
    index = np.arange(start, start + count)
    prompt = positions.shape[1]
    decode = np.tile(index + delta, (positions.shape[0], 1))
    return np.where(index < prompt, positions[:, np.minimum(index, prompt - 1)], decode)


def drive(state: Any, steps: int = 6, budget: int = 10) -> list[tuple[np.ndarray, np.ndarray]]:
    """Admit :func:`requests` into ``state`` (``init_prefill_positions``; ``apply_staged_writes`` where the
    state stages) and run ``steps`` scheduler steps of ``budget`` tokens: chunked prefill (a chunk ends at
    the prompt's end at the latest, as vLLM's scheduler does), then one decode token per request, the
    batch order rotating. Returns per step (``get_positions``, the expected positions)."""
    admitted = requests()
    computed = dict.fromkeys(range(MAX_NUM_REQS), 0)
    prefill_lens = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
    for slot, positions, delta in admitted:
        model = PositionsModel(torch.from_numpy(positions), delta)
        state.init_prefill_positions(slot, model, list(range(positions.shape[1])), [])
        assert len(model.calls) == 1
        prefill_lens[slot] = positions.shape[1]
    if hasattr(state, "apply_staged_writes"):
        state.apply_staged_writes()
    results = []
    for step in range(steps):
        order = admitted[step % len(admitted) :] + admitted[: step % len(admitted)]
        left, slots, lens, expected = budget, [], [], []
        for slot, positions, delta in order:
            remaining = positions.shape[1] - computed[slot]
            count = min(left, remaining) if remaining > 0 else min(left, 1)
            if count == 0:
                continue
            slots.append(slot)
            lens.append(count)
            expected.append(expected_positions(positions, delta, computed[slot], count))
            left -= count
        state.prepare_positions(
            torch.tensor(slots, dtype=torch.int64),
            torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32),
            prefill_lens,
            torch.tensor([computed[r] for r in range(MAX_NUM_REQS)], dtype=torch.int32),
        )
        for slot, count in zip(slots, lens, strict=True):
            computed[slot] += count
        total = sum(lens)
        results.append((state.get_positions(total).numpy().copy(), np.concatenate(expected, axis=1)))
    assert all(computed[slot] > positions.shape[1] for slot, positions, _ in admitted), "all must decode"
    return results


def cpu_state() -> Any:
    from vllm.v1.worker.cpu.rope import RopeState

    return RopeState(3, MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN, torch.device("cpu"))


def test_the_positions_are_sensitive() -> None:
    """The admitted prompts tell rows and deltas apart: a state that wrote the t row on every row, or
    forgot a delta, would not give :func:`expected_positions`."""
    for _, positions, delta in requests()[:2]:
        assert not np.array_equal(positions[1], positions[0]) and not np.array_equal(
            positions[2], positions[0]
        )
        assert delta != 0


def test_cpu_rope_state_serves_the_models_positions(prepare_op: Any) -> None:
    from vllm import _cpu_ops
    from vllm.v1.worker.cpu import rope

    assert rope.ops is _cpu_ops  # the unmodified module calls vLLM's wrapper, which calls the compiled op
    for got, expected in drive(cpu_state()):
        np.testing.assert_array_equal(got, expected)


def test_cpu_rope_state_reads_the_delta_it_stored(prepare_op: Any) -> None:
    """Negative control: a delta changed after admission moves the decode positions (the check above
    compares against the stored delta, not against whatever the state writes)."""
    state = cpu_state()
    slot = requests()[0][0]
    state.init_prefill_positions = _with_delta_shift(state.init_prefill_positions, slot, state)
    results = drive(state)
    assert any(not np.array_equal(got, expected) for got, expected in results)


def _with_delta_shift(init: Callable[..., None], slot: int, state: Any) -> Callable[..., None]:
    def shifted(req_idx: int, *args: Any) -> None:
        init(req_idx, *args)
        if req_idx == slot:
            state.prefill_delta[req_idx] += 1

    return shifted


def test_gpu_rope_state_needs_the_uva_stand_in() -> None:
    """Without the stand-in, the GPU state cannot allocate here (pinned memory); with it, its UVA path
    runs (pinned allocations and device views were asked for), and afterwards the module is as it was."""
    from vllm.v1.worker.gpu import buffer_utils
    from vllm.v1.worker.gpu.mm.rope import RopeState

    before = {name: getattr(buffer_utils, name) for name in ("torch", "is_uva_available")}
    with pytest.raises(RuntimeError, match="pin"):
        RopeState(3, MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN, torch.device("cpu"))
    with vllm034.uva_on_cpu() as stand_in:
        RopeState(3, MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN, torch.device("cpu"))
        assert stand_in.pinned_requests > 0 and stand_in.views > 0
    assert {name: getattr(buffer_utils, name) for name in before} == before
    assert buffer_utils.torch is torch


def test_gpu_rope_state_in_tritons_interpreter_equals_the_cpu_one(prepare_op: Any) -> None:
    from vllm.v1.worker.gpu.mm.rope import RopeState

    with vllm034.uva_on_cpu():
        gpu = RopeState(3, MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN, torch.device("cpu"))
        gpu_results = drive(gpu)
    cpu_results = drive(cpu_state())
    for (gpu_got, expected), (cpu_got, _) in zip(gpu_results, cpu_results, strict=True):
        np.testing.assert_array_equal(gpu_got, cpu_got)
        np.testing.assert_array_equal(gpu_got, expected)


def test_both_states_serve_pruned_positions(prepare_op: Any) -> None:
    """Video pruning's interface (``read_prefill_positions``, ``update_prefill_positions``): positions
    and a delta rewritten after admission are what both states read back and serve."""
    from vllm.v1.worker.gpu.mm.rope import RopeState

    slot, positions, _ = requests()[0]
    rewritten = torch.from_numpy(positions[:, ::-1].copy())
    new_delta = 11
    with vllm034.uva_on_cpu():
        states = [RopeState(3, MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN, torch.device("cpu")), cpu_state()]
        outputs = []
        for state in states:
            state.init_prefill_positions(slot, PositionsModel(torch.from_numpy(positions), 0), [], [])
            if hasattr(state, "apply_staged_writes"):
                state.apply_staged_writes()
            state.update_prefill_positions(slot, rewritten, new_delta)
            if hasattr(state, "apply_staged_writes"):
                state.apply_staged_writes()
            length = positions.shape[1]
            np.testing.assert_array_equal(
                state.read_prefill_positions(slot, length).numpy(), rewritten.numpy()
            )
            lens = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
            lens[slot] = length
            computed = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
            computed[slot] = length - 4  # the prompt's last 4 tokens, then (next step) one decode token
            state.prepare_positions(
                torch.tensor([slot]), torch.tensor([0, 4], dtype=torch.int32), lens, computed
            )
            prompt_tail = state.get_positions(4).numpy().copy()
            computed[slot] = length
            state.prepare_positions(
                torch.tensor([slot]), torch.tensor([0, 1], dtype=torch.int32), lens, computed
            )
            outputs.append((prompt_tail, state.get_positions(1).numpy().copy()))
    for prompt_tail, decode in outputs:
        np.testing.assert_array_equal(prompt_tail, rewritten.numpy()[:, -4:])
        np.testing.assert_array_equal(decode, np.full((3, 1), positions.shape[1] + new_delta))
