"""GLM-Image (``mrope.families.glm_image``) against transformers 5.24's own ``get_rope_index`` (unbound on
its config) on prompts in its processor's layout: positions, deltas and the decode positions it caches at
prefill (``generation_positions``); batches with ``images_per_sample`` and masks; edges; errors; and the
refusals where mrope serves ``index + delta``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from support.engine import chunked_fill
from support.glm_image import END, IMAGE, START, glm_prompts
from support.peers import as_numpy, require, transformers_config, transformers_glm_image_rope_index


@pytest.fixture(scope="module")
def glm_image():
    """(config, family) of the default GLM-Image config."""
    require("torch", "transformers")
    config = transformers_config("glm_image")
    return config, mrope.from_config(config, compat="transformers")


def check_prompt(config, family, ids: list[int], grids: list[list[int]]) -> None:
    """``family.positions`` and ``generation_positions`` equal transformers' on one prompt."""
    import torch

    expected, deltas, cache = transformers_glm_image_rope_index(
        config, torch.tensor([ids]), image_grid_thw=torch.tensor(grids) if grids else None
    )
    positions, delta = family.positions(ids, image_grid_thw=grids or None)
    np.testing.assert_array_equal(positions, as_numpy(expected)[:, 0], strict=True)
    assert delta == 0 and as_numpy(deltas).tolist() == [[0]]
    made = family.generation_positions(ids, image_grid_thw=grids or None)
    if cache is None:
        assert made.shape == (3, 0)
    else:
        np.testing.assert_array_equal(made, as_numpy(cache)[0], strict=True)


@given(prompt=glm_prompts())
def test_prompts_and_their_generation_positions_match_transformers(glm_image, prompt):
    check_prompt(*glm_image, *prompt)


@settings(max_examples=60)
@given(data=st.data())
def test_padded_batches_with_images_per_sample_match_transformers(glm_image, data):
    import torch

    config, family = glm_image
    rows = data.draw(st.lists(glm_prompts(), min_size=1, max_size=3), label="prompts")
    length = max(len(ids) for ids, _ in rows) + data.draw(st.integers(0, 2), label="extra padding")
    left = data.draw(st.booleans(), label="left padding")
    ids, mask = [], []
    for row, _ in rows:
        pad = [0] * (length - len(row))
        ids.append(pad + row if left else row + pad)
        mask.append([0] * len(pad) + [1] * len(row) if left else [1] * len(row) + [0] * len(pad))
    grids = [g for _, row_grids in rows for g in row_grids]
    counts = [len(row_grids) for _, row_grids in rows]
    expected, expected_deltas, cache = transformers_glm_image_rope_index(
        config,
        torch.tensor(ids),
        image_grid_thw=torch.tensor(grids),
        images_per_sample=torch.tensor(counts),
        attention_mask=torch.tensor(mask),
    )
    positions, deltas = mrope.get_rope_index(
        family,
        torch.tensor(ids),
        image_grid_thw=torch.tensor(grids),
        images_per_sample=torch.tensor(counts),
        attention_mask=torch.tensor(mask),
    )
    real = np.array(mask, dtype=bool)  # (transformers leaves 1 in padded slots, mrope 0)
    np.testing.assert_array_equal(as_numpy(positions)[:, real], as_numpy(expected)[:, real])
    assert not as_numpy(positions)[:, ~real].any()
    np.testing.assert_array_equal(as_numpy(deltas), as_numpy(expected_deltas), strict=True)
    first = np.cumsum(counts) - counts
    batch_made = family.batch_generation_positions(
        torch.tensor(ids),
        image_grid_thw=torch.tensor(grids),
        images_per_sample=torch.tensor(counts),
        attention_mask=torch.tensor(mask),
    )
    assert len(batch_made) == len(rows)
    for r, (row, _) in enumerate(rows):
        row_grids = grids[first[r] : first[r] + counts[r]]
        made = family.generation_positions(row, image_grid_thw=row_grids)
        np.testing.assert_array_equal(made, as_numpy(cache)[r, :, : made.shape[1]], strict=True)
        np.testing.assert_array_equal(batch_made[r], made, strict=True)
        alone, _ = family.positions(row, image_grid_thw=row_grids)
        np.testing.assert_array_equal(alone, as_numpy(positions)[:, r, real[r]])


def test_rope_index_reads_images_per_sample_from_the_processor_output(glm_image):
    from mrope.integrations.transformers import rope_index

    _, family = glm_image
    ids = np.array([[7, START, IMAGE, IMAGE, END, START], [0, 0, 1, 2, 3, START]])
    grids, counts = [[1, 1, 2], [1, 2, 2], [1, 3, 1], [1, 1, 1]], [2, 2]
    expected, _ = mrope.get_rope_index(family, ids, image_grid_thw=grids, images_per_sample=counts)
    inputs = {"input_ids": ids, "image_grid_thw": np.array(grids), "images_per_sample": np.array(counts)}
    np.testing.assert_array_equal(rope_index(family, inputs)[0], expected)


def test_rule_of_an_image_to_image_prompt(glm_image):
    _, family = glm_image
    ids = [7, START] + [IMAGE] * 6 + [END, 8, START]  # a 2 x 3 source image, then the generation's start
    grids = [[1, 2, 3], [1, 2, 2]]
    positions, delta = family.positions(ids, image_grid_thw=grids)
    assert positions[:, :2].tolist() == [[0, 1]] * 3
    assert positions[:, 2:8].tolist() == [[2] * 6, [2, 2, 2, 3, 3, 3], [2, 3, 4, 2, 3, 4]]
    assert positions[:, 8:].tolist() == [[5, 6, 7]] * 3 and delta == 0  # text resumes at 2 + max(2, 3)
    made = family.generation_positions(ids, image_grid_thw=grids)
    assert made.tolist() == [[8, 8, 8, 8, 10], [8, 8, 9, 9, 10], [8, 9, 8, 9, 10]]


@pytest.mark.parametrize(
    "ids, grids",
    [
        pytest.param([START] + [IMAGE] * 4 + [END], [[1, 2, 2]], id="only a complete image, nothing to make"),
        pytest.param([START] + [IMAGE] * 4 + [END], [[1, 2, 2], [1, 3, 1]], id="ends with an image"),
        pytest.param([5, 6, 7], None, id="no grids: no cache"),
        pytest.param([START], [[1, 3, 2], [1, 1, 1]], id="only the generation's start"),
        pytest.param([5, START], [[1, k % 3 + 1, k % 2 + 1] for k in range(11)], id="more targets than few"),
    ],
)
def test_edges_match_transformers(glm_image, ids, grids):
    check_prompt(*glm_image, ids, grids)


def test_a_batch_row_without_grids_and_a_hole_in_the_mask(glm_image):
    import torch

    config, family = glm_image
    one = [START] + [IMAGE] * 2 + [END, 9, START]
    two = [4, 4, 4, 4, 4, START]
    mask = [[1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]]  # a hole: the real tokens laid end to end
    ids = [one[:2] + [0] + one[2:-1], two]
    grids, counts = [[1, 1, 2], [1, 2, 2], [1, 1, 1], [1, 3, 3]], [2, 2]
    expected, _, cache = transformers_glm_image_rope_index(
        config,
        torch.tensor(ids),
        image_grid_thw=torch.tensor(grids),
        images_per_sample=torch.tensor(counts),
        attention_mask=torch.tensor(mask),
    )
    positions, _ = mrope.get_rope_index(
        family, np.array(ids), image_grid_thw=grids, images_per_sample=counts, attention_mask=np.array(mask)
    )
    real = np.array(mask, dtype=bool)
    np.testing.assert_array_equal(positions[:, real], as_numpy(expected)[:, real])
    made = family.batch_generation_positions(
        np.array(ids), image_grid_thw=grids, images_per_sample=counts, attention_mask=np.array(mask)
    )
    for r in range(2):  # (the first row's cache is the shorter: padded by repeating its last column)
        np.testing.assert_array_equal(made[r], as_numpy(cache)[r, :, : made[r].shape[1]], strict=True)
        assert (as_numpy(cache)[r, :, made[r].shape[1] :] == made[r][:, -1:]).all()
    text_only = family.batch_generation_positions(np.array([two, two]), images_per_sample=[0, 0])
    assert [m.shape for m in text_only] == [(3, 0), (3, 0)]
    no_grids, _ = mrope.get_rope_index(family, np.array([two, two]), images_per_sample=[0, 0])
    assert no_grids[:, 1].tolist() == [list(range(6))] * 3


def test_bad_inputs_name_what_is_wrong(glm_image):
    _, family = glm_image
    image = [START] + [IMAGE] * 4 + [END]
    with pytest.raises(MRopeError, match=r"row 0, index 1: image_end_token_id closes no image"):
        family.positions([5, END, START], image_grid_thw=[[1, 1, 1]])
    with pytest.raises(MRopeError, match=r"row 0, index 1: image_start_token_id opens an image inside"):
        family.positions([START, START, END], image_grid_thw=[[1, 1, 1]])
    with pytest.raises(MRopeError, match=r"row 0 holds 2 complete images .* but 1 grids"):
        family.positions(image + image, image_grid_thw=[[1, 2, 2]])
    with pytest.raises(MRopeError, match=r"row 0 holds 1 complete images .* but 0 grids"):
        family.positions(image)
    with pytest.raises(
        MRopeError,
        match=r"image_grid_thw\[0\] = \(1, 2, 3\) is an image of 4 tokens .*"
        r"index 1 of row 0\): expected H \* W = 6",
    ):
        family.positions(image, image_grid_thw=[[1, 2, 3]])
    with pytest.raises(MRopeError, match=r"image_grid_thw\[1\] = \(2, 2, 2\): glm_image images have T = 1"):
        family.positions(image, image_grid_thw=[[1, 2, 2], [2, 2, 2]])
    with pytest.raises(MRopeError, match="takes no video_grid_thw"):
        family.positions(image, image_grid_thw=[[1, 2, 2]], video_grid_thw=[[1, 2, 2]])
    with pytest.raises(MRopeError, match="takes no offsets"):
        family.positions(image, image_grid_thw=[[1, 2, 2]], image_offsets=[1])
    with pytest.raises(
        MRopeError, match=r"the 4,000,000,000,001 tokens to generate after position 1 .* past"
    ):
        family.generation_positions([START], image_grid_thw=[[1, 2_000_000, 2_000_000]])
    ids = np.array([image + [START]] * 2)
    with pytest.raises(MRopeError, match="a batch of 2 rows with image_grid_thw needs images_per_sample"):
        mrope.get_rope_index(family, ids, image_grid_thw=[[1, 2, 2]] * 4)
    with pytest.raises(MRopeError, match=r"images_per_sample = \[3, 0\]: expected 2 counts >= 0 .* to the 4"):
        mrope.get_rope_index(family, ids, image_grid_thw=[[1, 2, 2]] * 4, images_per_sample=[3, 0])
    with pytest.raises(MRopeError, match=r"images_per_sample = \[4\]: expected 2 counts"):
        mrope.get_rope_index(family, ids, image_grid_thw=[[1, 2, 2]] * 4, images_per_sample=[4])
    qwen = mrope.from_config(transformers_config("qwen2_vl"))
    with pytest.raises(MRopeError, match=r"qwen2_vl takes no images_per_sample \(only for glm_image\)$"):
        mrope.get_rope_index(qwen, np.array([[1, 2]]), images_per_sample=[0])
    with pytest.raises(MRopeError, match=r"qwen2_vl: a token past the prompt takes index \+ delta"):
        qwen.batch_generation_positions(np.array([[1, 2]]))
    with pytest.raises(MRopeError, match=r"attention_mask has shape \(1, 3\), input_ids has \(2, 7\)"):
        family.batch_generation_positions(
            ids, image_grid_thw=[[1, 2, 2]] * 4, images_per_sample=[2, 2], attention_mask=[[1, 1, 1]]
        )
    with pytest.raises(MRopeError, match="a batch of 2 rows with image_grid_thw needs images_per_sample"):
        family.batch_generation_positions(ids, image_grid_thw=[[1, 2, 2]] * 4)


def test_config_reading_names_missing_fields():
    config = {"model_type": "glm_image", "image_token_id": IMAGE, "image_start_token_id": START}
    with pytest.raises(MRopeError, match="glm_image needs the setting 'image_end_token_id'"):
        mrope.from_config(config)
    family = mrope.from_config(
        {**config, "image_end_token_id": END, "vision_config": {"spatial_merge_size": 2}}
    )
    assert family.spatial_merge_size == 1  # transformers positions the grids unmerged, whatever the config
    assert family.settings == {
        "image_token_id": IMAGE,
        "image_start_token_id": START,
        "image_end_token_id": END,
    }


def _outcome(call):
    """The message of the MRopeError ``call()`` raised, or None where it returned."""
    try:
        call()
    except MRopeError as error:
        return str(error)
    return None


@settings(max_examples=60, deadline=None)
@given(prompt=glm_prompts(complete=True), edit=st.sampled_from(["none", "no grids", "drop", "end", "start"]))
def test_every_call_refuses_what_positions_refuses(glm_image, prompt, edit):
    """``positions``, ``segments``, :meth:`PositionTable.add` and ``generation_positions`` (and
    ``batch_generation_positions``) take the same prompts and refuse the same ones with the same message:
    a complete image without its grid (no grids at all, or one dropped), markers that do not alternate."""
    _, family = glm_image
    ids, grids = prompt
    if edit == "no grids":
        grids = []
    elif edit == "drop":
        grids = grids[1:]
    elif edit in ("end", "start"):
        ids = ids + [END if edit == "end" else START]
    kwargs = {"image_grid_thw": grids or None}
    table = mrope.PositionTable(1)
    outcomes = {
        "positions": _outcome(lambda: family.positions(ids, **kwargs)),
        "segments": _outcome(lambda: family.segments(ids, **kwargs)),
        "add": _outcome(lambda: table.add(0, family, ids, **kwargs)),
        "generation_positions": _outcome(lambda: family.generation_positions(ids, **kwargs)),
        "batch_generation_positions": _outcome(
            lambda: family.batch_generation_positions(np.array([ids]), **kwargs)
        ),
    }
    assert len(set(outcomes.values())) == 1, outcomes
    if edit == "no grids" and IMAGE in ids:  # the case: a complete image, no grids
        assert "complete images (image_start .. image_end) but 0 grids" in outcomes["positions"]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_serving_table_gives_the_prompt_and_the_generated_tokens_transformers_positions(glm_image, data):
    """Two requests in a :class:`mrope.PositionTable`, filled in random chunks (chunked prefill, then
    decode) on the numpy, numba and torch paths: the prompt's positions, then transformers' decode
    cache (``_cached_decode_position_ids``), then ``index + delta`` past it."""
    import torch

    config, family = glm_image
    prompts = data.draw(st.lists(glm_prompts(), min_size=2, max_size=2), label="prompts")
    expected = []
    for ids, grids in prompts:
        prompt, _, cache = transformers_glm_image_rope_index(
            config, torch.tensor([ids]), image_grid_thw=torch.tensor(grids)
        )
        made = as_numpy(cache)[0]
        past = made[:, -1:] + np.arange(1, 4)  # three tokens past the end marker: index + delta
        expected.append(np.concatenate([as_numpy(prompt)[:, 0], made, past], axis=1))
    totals = np.array([e.shape[1] for e in expected])
    chunks = [
        data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=40), label="chunks") for _ in prompts
    ]
    for backend in ("numpy", "numba", "torch"):
        table = mrope.PositionTable(4, backend="numpy" if backend == "numpy" else "auto")
        for slot, (ids, grids) in zip((3, 1), prompts, strict=True):
            table.add(slot, family, ids, image_grid_thw=grids)
        got = chunked_fill(table, [3, 1], totals, chunks, backend)
        for row, want in zip(got, expected, strict=True):
            np.testing.assert_array_equal(row, want, err_msg=backend)


def test_vllm_refuses_it_sglang_serves_it(glm_image):
    from mrope.integrations import sglang as mrope_sglang
    from mrope.integrations.vllm.features import unsupported_reason

    _, family = glm_image
    assert "mrope's vLLM integration serves index + delta" in unsupported_reason(family)
    # SGLang stores the generation's positions past the prompt and reads them by index: mrope serves
    # both (tests/integrations/sglang/test_sglang_glm_image.py), as the transformers patch does, setting
    # the decode cache (tests/integrations/test_transformers.py)
    assert "glm_image" in mrope_sglang.PROMPT_MODEL_TYPES and "glm_image" in mrope_sglang.STEP_MODEL_TYPES
