"""``inputs_from_mm_features`` without vLLM: the feature objects faked as vLLM lays them out (a
``modality``, an ``mm_position`` with its ``offset``, ``data`` mapping field names to elements whose
``data`` is the item's tensor). Grids are read as the core reads them: integers only (issue 20)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import mrope
from mrope import MRopeError
from mrope.integrations._vllm_inputs import VLLM_SETTINGS, inputs_from_mm_features

CONFIG = {
    "model_type": "qwen2_5_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
}


def feature(modality: str, offset: int, **data) -> SimpleNamespace:
    return SimpleNamespace(
        modality=modality,
        mm_position=SimpleNamespace(offset=offset, length=0, is_embed=None),
        data={name: SimpleNamespace(data=value) for name, value in data.items()},
    )


@pytest.fixture(scope="module")
def family():
    return mrope.from_config(CONFIG, **VLLM_SETTINGS)


def test_integer_grids_are_read(family):
    got = inputs_from_mm_features(
        family,
        [
            feature("video", 9, video_grid_thw=np.array([2, 4, 4], dtype=np.int32), second_per_grid_ts=0.5),
            feature("image", 2, image_grid_thw=[1, 4, 6]),
        ],
    )
    np.testing.assert_array_equal(got["image_grid_thw"], [[1, 4, 6]])
    np.testing.assert_array_equal(got["video_grid_thw"], [[2, 4, 4]])
    assert got["image_offsets"] == [2] and got["video_offsets"] == [9]
    assert got["image_grid_thw"].dtype == np.int64


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        (np.array([1.7, 4.0, 4.0], dtype=np.float32), r"must hold integers, got dtype float32"),
        ([1.0, 4.0, 4.0], r"must hold integers, got dtype float64"),
        (np.array([True, True, True]), r"must hold integers, got dtype bool"),
        ([1, 1 << 64, 4], r"at offset 3's image_grid_thw\[1\] = 18446744073709551616 does not fit"),
        ([1, 4], r"the feature at offset 3's image_grid_thw must be \(T, H, W\), got \[1, 4\]"),
        ([[1, 4, 4]], r"the feature at offset 3's image_grid_thw must be 1-D"),
    ],
)
def test_grids_that_are_not_three_integers_are_refused(family, grid, match):
    """A float grid was truncated (``[1.7, 4, 4]`` read as ``[1, 4, 4]``) where the core refuses it."""
    with pytest.raises(MRopeError, match=match):
        inputs_from_mm_features(family, [feature("image", 3, image_grid_thw=grid)])


def test_torch_float_grids_are_refused(family):
    torch = pytest.importorskip("torch")
    with pytest.raises(
        MRopeError, match=r"the feature at offset 0's video_grid_thw must hold integers, got dtype float32"
    ):
        inputs_from_mm_features(family, [feature("video", 0, video_grid_thw=torch.tensor([2.0, 4.0, 4.0]))])
    got = inputs_from_mm_features(family, [feature("video", 0, video_grid_thw=torch.tensor([2, 4, 4]))])
    np.testing.assert_array_equal(got["video_grid_thw"], [[2, 4, 4]])
