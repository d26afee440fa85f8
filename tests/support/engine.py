"""Shared helpers of the serving tests: families of every supported model type (Omni included), the
plain reference, and a random engine driven by hypothesis (admission, chunked prefill, decode,
speculative steps, preemption and re-add, removal)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import mrope
from mrope import MRopeError

CONFIGS = {
    "qwen2_vl": {
        "model_type": "qwen2_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_config": {"spatial_merge_size": 2},
    },
    "qwen2_5_vl": {
        "model_type": "qwen2_5_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
    },
    "qwen3_vl": {
        "model_type": "qwen3_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_config": {"spatial_merge_size": 2},
    },
    "glm4v": {
        "model_type": "glm4v",
        "image_token_id": 151343,
        "video_start_token_id": 151341,
        "video_end_token_id": 151342,
        "vision_config": {"spatial_merge_size": 2},
    },
}


OMNI = ("qwen2_5_omni", "qwen3_omni_moe")  # Qwen3-Omni: float32 positions, a float32 table


@functools.cache
def family(name: str, compat: str = "vllm") -> Any:
    if name in OMNI:
        from support.peers import transformers_omni_config

        pps = {"qwen3_omni_moe": 13}.get(name, 25)  # Qwen3-Omni checkpoints: 13 (fractional times)
        return mrope.from_config(transformers_omni_config(name, position_id_per_seconds=pps), compat=compat)
    return mrope.from_config(CONFIGS[name], compat=compat)


def reference(positions: np.ndarray, delta: Any, start: int, count: int, dtype: Any = np.int64) -> np.ndarray:
    """Positions (3, count) of indices ``start ...``: the prompt's own, then ``index + delta`` (float32
    tables: ``float32(index) + float32(delta)`` in float32, as transformers)."""
    out = np.empty((3, count), dtype=dtype)
    for k in range(count):
        j = start + k
        if j < positions.shape[1]:
            out[:, k] = positions[:, j]
        else:
            out[:, k] = np.float32(j) + np.float32(delta) if out.dtype == np.float32 else j + delta
    return out


@dataclass
class Live:
    """A running request as the test engine sees it."""

    fam: Any
    ids: list[int]
    kwargs: dict[str, Any]
    positions: np.ndarray
    delta: int
    computed: int = 0
    generated: list[int] = field(default_factory=list)


def register(
    table: Any, row: int, fam: Any, ids: list[int], kwargs: dict[str, Any], precomputed: bool
) -> Live:
    positions, delta = fam.positions(ids, **kwargs)
    if precomputed:
        try:
            table.add_positions(row, positions, delta)
        except MRopeError as err:  # Omni positions segments cannot always be recovered from
            # (Qwen3-Omni's family is named after its thinker config, "qwen3_omni_moe_thinker")
            omni = fam.model_type.removesuffix("_thinker") in OMNI
            assert omni and "register the request with add()" in str(err), err
            assert row not in table
            precomputed = False
    if not precomputed:
        table.add(row, fam, ids, **kwargs)
    return Live(fam, ids, kwargs, positions, delta)


def chunked_fill(
    table: Any, slots: list[int], totals: np.ndarray, chunks: list[list[int]], path: str
) -> list[np.ndarray]:
    """Each request's positions ``(3, totals[i])``, written by steps of ``table.fill`` that schedule
    ``chunks[i][k % len(chunks[i])]`` tokens of request ``i`` at step ``k`` (fewer at its end): chunked
    prefill, then decode; on the numpy path, or with ``path == "torch"`` the torch path."""
    import torch

    got = [np.zeros((3, 0), dtype=np.int64) for _ in slots]
    done, step = np.zeros(len(slots), dtype=np.int64), 0
    while (done < totals).any():
        sizes = np.array([c[step % len(c)] for c in chunks]).clip(0, totals - done)
        out = np.zeros((3, int(sizes.sum())), dtype=np.int64)
        arrays = (np.array(slots), done.copy(), sizes)
        if path == "torch":
            table.fill(torch.from_numpy(out), *map(torch.from_numpy, arrays), out.shape[1])
        else:
            table.fill(out, *arrays)
        parts = np.split(out, np.cumsum(sizes)[:-1], axis=1)
        got = [np.concatenate([g, part], axis=1) for g, part in zip(got, parts, strict=True)]
        done += sizes
        step += 1
    return got


def churn(table: Any, device: Any, cycles: int) -> None:
    """Admissions and removals between device steps (torch tensors on ``device``); each step equals the
    host path's."""
    import torch

    from support.strategies import Image, Video, build_prompt, text

    q25 = family("qwen2_5_vl")
    prompts = [
        build_prompt(q25, [text(2 + k), Video(2 + k % 3, 2, 2), text(1), Image(1, 2), text(k % 4)], [0.7])
        for k in range(5)
    ]
    for cycle in range(cycles):
        slot = cycle % 3
        if slot in table:
            table.remove(slot)
        prompt = prompts[cycle % len(prompts)]
        table.add(slot, q25, prompt.input_ids, **prompt.kwargs())
        live = [s for s in range(3) if s in table]
        step = (live, [0] * len(live), [table.prompt_length(s) for s in live])
        num = sum(step[2])
        expected = np.zeros((3, num), dtype=np.int64)
        table.fill(expected, *(np.array(a) for a in step))
        out = torch.zeros((3, num), dtype=torch.int64, device=device)
        table.fill(out, *(torch.tensor(a, device=device) for a in step), num_tokens=num)
        np.testing.assert_array_equal(out.cpu().numpy(), expected, err_msg=f"cycle {cycle}")
    table.check()
