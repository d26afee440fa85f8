"""Items' placeholder offsets as an engine's processor records them, derived from a prompt's token
layout by a plain Python pass (independent of mrope): for the tests of ``image_offsets``,
``video_offsets``, ``frame_offsets`` and ``items``."""

from __future__ import annotations

import numpy as np

from .strategies import layout_kind


def _runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(start, end) of each maximal run of ``token`` in ``ids``."""
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == token:
            j = i
            while j < len(ids) and ids[j] == token:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


def item_offsets(family, ids: list[int], videos: list[list[int]]) -> tuple[list[int], list[int]]:
    """Offsets as an engine's processor records them: each image's first placeholder; each video's first
    placeholder (one-block layouts) or the start of its placeholder range (frame layouts: the index before
    its first frame, Qwen3-VL's ``vision_start``; GLM's ``begin_of_video``)."""
    kind = layout_kind(family)
    if kind == "glm":
        image_runs, frame_runs, depth = [], [], 0
        starts = []
        for i, token in enumerate(ids):
            if token == family.video_start_token_id:
                depth += 1
                starts.append(i)
            elif token == family.video_end_token_id:
                depth -= 1
            elif token == family.image_token_id and (i == 0 or ids[i - 1] != token):
                (frame_runs if depth else image_runs).append(i)
        return image_runs, starts
    images = [s for s, _ in _runs(ids, family.image_token_id)]
    frames = [s for s, _ in _runs(ids, family.video_token_id)]
    if kind == "whole":
        return images, frames
    first = np.cumsum([0] + [v[0] for v in videos])[:-1]
    return images, [frames[f] - 1 for f in first]


def frame_offsets(family, ids: list[int]) -> list[int]:
    """Frame families: where each video frame's placeholders start (the runs of the frame token inside a
    video's range, as vLLM's ``is_embed`` marks them), every video's frames in order."""
    if layout_kind(family) == "glm":
        starts, depth = [], 0
        for i, token in enumerate(ids):
            depth += (token == family.video_start_token_id) - (token == family.video_end_token_id)
            if depth and token == family.image_token_id and ids[i - 1] != token:
                starts.append(i)
        return starts
    return [s for s, _ in _runs(ids, family.video_token_id)]


def assert_table_row(table, slot: int, expected: np.ndarray, delta: int, context: str) -> None:
    """``slot``'s row of a table (the prompt, then two decode tokens) equals ``expected`` positions,
    then ``index + delta``."""
    length = expected.shape[1]
    out = np.zeros((3, length + 2), dtype=np.int64)
    table.fill(out, np.array([slot]), np.array([0]), np.array([length + 2]))
    np.testing.assert_array_equal(out[:, :length], expected, err_msg=f"table: {context}")
    decode = np.broadcast_to(np.arange(length, length + 2) + delta, (3, 2))
    np.testing.assert_array_equal(out[:, length:], decode, err_msg=f"decode: {context}")
