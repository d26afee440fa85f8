"""GLM-Image in mrope's SGLang integration, without an engine, against SGLang's own code: the processor's
positions (``GlmImageProcessor._compute_glm_image_mrope_positions``, run unbound on a stand-in holding
the token ids it reads) from mrope's ``positions`` + ``generation_positions`` and from the patched
function; the step (extend chunks, decode inside and past the generation, a retracted request) against
SGLang's ``ForwardBatch`` methods, on the host and torch paths and through the patched methods in check
mode; negative controls (target grids in the wrong order) that make each comparison fail."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given

import mrope  # noqa: E402
from mrope import MRopeError  # noqa: E402
from mrope.families import GlmImage  # noqa: E402
from mrope.integrations import sglang as plugin  # noqa: E402
from mrope.integrations._sglang_step import RunnerTable  # noqa: E402
from support.glm_image import END, IMAGE, START, glm_prompts  # noqa: E402
from support.peers import transformers_config  # noqa: E402
from support.sglang_step import step_batch  # noqa: E402

CONFIG = {"model_type": "glm_image", "image_token_id": IMAGE, "image_start_token_id": START}
CONFIG["image_end_token_id"] = END
FAMILY = mrope.from_config(CONFIG, **plugin.SGLANG_SETTINGS)
PROCESSOR = SimpleNamespace(IM_TOKEN_ID=IMAGE, IMAGE_START_TOKEN_ID=START, IMAGE_END_TOKEN_ID=END)
NAME = "_compute_glm_image_mrope_positions"  # SGLang's processor method the integration replaces


def sglang_function() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """SGLang's own processor function (the class attribute while the integration is off)."""
    from sglang.srt.multimodal.processors.glm_image import GlmImageProcessor

    assert plugin.is_enabled() is None
    return vars(GlmImageProcessor)[NAME]


def served_function() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    from sglang.srt.multimodal.processors.glm_image import GlmImageProcessor

    return getattr(GlmImageProcessor, NAME)


@pytest.fixture
def sglang_positions() -> Iterator[Callable[..., tuple[torch.Tensor, torch.Tensor]]]:
    plugin.disable()
    plugin.reset_stats()
    yield sglang_function()
    plugin.disable()
    plugin.reset_stats()


def _grids(grids: list[list[int]]) -> torch.Tensor | None:
    return torch.tensor(grids) if grids else None


@given(prompt=glm_prompts(complete=True))
def test_positions_and_generation_positions_are_sglangs(prompt: tuple[list[int], list[list[int]]]) -> None:
    """mrope's prompt positions, then its generation positions, are SGLang's stored positions; the one
    difference: where every grid is a complete image SGLang stores no end marker's position (mrope's,
    like transformers', is one column)."""
    ids, grids = prompt
    expected, delta = sglang_function()(PROCESSOR, torch.tensor(ids), _grids(grids))
    positions, ours = FAMILY.positions(ids, image_grid_thw=grids or None)
    made = FAMILY.generation_positions(ids, image_grid_thw=grids or None)
    assert ours == 0 and delta.tolist() == [0] and expected.dtype == torch.int64
    targets = len(grids) - ids.count(END)
    if grids and not targets:
        assert made.shape == (3, 1)  # the end marker's position, which SGLang leaves out
        made = made[:, :0]
    np.testing.assert_array_equal(np.concatenate([positions, made], axis=1), expected.numpy(), strict=True)


@given(prompt=glm_prompts(complete=True))
def test_the_patched_function_is_sglangs(prompt: tuple[list[int], list[list[int]]]) -> None:
    """In both modes (check mode compares the two), with the stats of one prompt served."""
    ids, grids = prompt
    sglang = sglang_function()
    expected, expected_delta = sglang(PROCESSOR, torch.tensor(ids), _grids(grids))
    for mode in plugin.MODES:
        plugin.enable(mode)
        try:
            plugin.reset_stats()
            got, delta = served_function()(PROCESSOR, torch.tensor(ids), _grids(grids))
            assert plugin.stats()["prompts"] == 1 and plugin.stats()["fallback_prompts"] == 0
            assert plugin.stats()["checked_prompts"] == (mode == "check")
        finally:
            plugin.disable()
        assert got.dtype == expected.dtype and torch.equal(got, expected), (mode, ids, grids)
        assert delta.dtype == expected_delta.dtype and torch.equal(delta, expected_delta)


def _reversed_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrong variant: the target grids generated in the processor's order, not the last first."""
    generation_positions = GlmImage.generation_positions

    def wrong(self: GlmImage, input_ids: Any, *, image_grid_thw: Any = None) -> np.ndarray:
        grids = np.array(image_grid_thw, dtype=np.int64)
        complete = int(np.count_nonzero(np.asarray(input_ids) == self.image_end_token_id))
        grids[complete:] = grids[complete:][::-1].copy()
        return generation_positions(self, input_ids, image_grid_thw=grids)

    monkeypatch.setattr(GlmImage, "generation_positions", wrong)


TEXT_TO_IMAGE = ([7, 8, 9, START], [[1, 2, 3], [1, 4, 5]])  # two target grids of other sizes


def test_check_mode_raises_on_target_grids_in_the_wrong_order(
    sglang_positions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: the wrong variant differs from SGLang (compared directly) and check mode raises,
    naming the first generated token that differs."""
    ids, grids = TEXT_TO_IMAGE
    expected, _ = sglang_positions(PROCESSOR, torch.tensor(ids), _grids(grids))
    _reversed_targets(monkeypatch)
    made = FAMILY.generation_positions(ids, image_grid_thw=grids)
    assert not np.array_equal(made, expected[:, len(ids) :].numpy())
    plugin.enable("check")
    message = r"glm_image column 7 \(generation, token 3\): t, h, w = \[4, 5, 4\] from mrope, \[4, 4, 7\]"
    with pytest.raises(MRopeError, match=message):
        served_function()(PROCESSOR, torch.tensor(ids), _grids(grids))


def test_a_refused_prompt_takes_sglangs_function(sglang_positions: Any) -> None:
    """A prompt of more complete images than grids (mrope refuses it, SGLang stops at its grids)."""
    ids = [1, START, IMAGE, IMAGE, END, START, IMAGE, END, START]
    grids = torch.tensor([[1, 1, 2]])
    expected, _ = sglang_positions(PROCESSOR, torch.tensor(ids), grids)
    plugin.enable("mrope")
    got, _ = served_function()(PROCESSOR, torch.tensor(ids), grids)
    assert torch.equal(got, expected)
    assert plugin.stats()["fallback_prompts"] == 1 and plugin.stats()["prompts"] == 0
    plugin.enable("check")
    with pytest.raises(MRopeError, match="mrope check: glm_image prompt refused"):
        served_function()(PROCESSOR, torch.tensor(ids), grids)


def test_disable_restores_sglangs_processor(sglang_positions: Any) -> None:
    plugin.enable("mrope")
    assert served_function() is not sglang_positions
    plugin.disable()
    assert served_function() is sglang_positions


# -- steps ---------------------------------------------------------------------------------------------
PROMPTS = [  # (prompt, grids): text-to-image; image-to-image; text only (no multimodal inputs)
    ([5, 6, 7, 8, START], [[1, 2, 3], [1, 3, 4]]),
    ([5, 6, START] + [IMAGE] * 6 + [END, 9, 9, START], [[1, 2, 3], [1, 3, 2]]),
    ([5, 6, 7], []),
    ([5, START] + [IMAGE] * 4 + [END, 9, START], [[1, 2, 2], [1, 2, 3]]),  # retracted: 4 tokens generated
]
SLOTS = [3, 1, 7, 2]
RETRACTED_OUTPUTS = 4


def _requests(positions: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> tuple[list[Any], list[Any]]:
    """SGLang's requests and multimodal inputs, their stored positions from ``positions`` (SGLang's
    processor function, or a variant); the last one retracted (SGLang extends its stored positions)."""
    from sglang.srt.managers.mm_utils import extend_mrope_positions_for_retracted_request

    reqs, mms = [], []
    for i, (ids, grids) in enumerate(PROMPTS):
        reqs.append(SimpleNamespace(rid=f"r{i}", session=None, origin_input_ids=ids))
        if not grids:
            mms.append(None)
            continue
        stored, delta = positions(PROCESSOR, torch.tensor(ids), _grids(grids))
        if i == 3:
            stored = extend_mrope_positions_for_retracted_request(stored, RETRACTED_OUTPUTS)
        sources = grids[: ids.count(END)]
        start = ids.index(IMAGE) if sources else 0
        item = SimpleNamespace(  # a source image as SGLang's item holds it: its grid only, its offsets
            is_image=lambda: True,
            model_specific_data={"image_grid_thw": torch.tensor(sources)},
            offsets=[(start, start + ids.count(IMAGE) - 1)],
        )
        mms.append(
            SimpleNamespace(
                mm_items=[item] if sources else [],
                mrope_positions=stored,
                mrope_position_delta=delta.reshape(1, 1),
                mrope_position_delta_repeated_cache=None,
            )
        )
    return reqs, mms


def _lengths() -> list[int]:
    """Each request's tokens at its (first) prefill: prompt, and the retracted one's generated tokens."""
    return [len(ids) + (RETRACTED_OUTPUTS if i == 3 else 0) for i, (ids, _) in enumerate(PROMPTS)]


def _batch(reqs: list[Any], mms: list[Any], prefix: list[int], extend: list[int]) -> tuple[Any, Any]:
    return step_batch(reqs, mms, SLOTS, prefix, extend, sglang_methods=True)


def _table(host: bool, counts: dict[str, int]) -> RunnerTable:
    pool = SimpleNamespace(req_generation=torch.zeros(9, dtype=torch.int64))
    pool.req_generation[SLOTS] = 1

    def count(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    def warn(kind: str, error: BaseException) -> None:
        raise AssertionError(f"{kind}: {error}")

    return RunnerTable(FAMILY, pool, "cpu", count, warn, host=host)


def _decodes(reqs: list[Any], mms: list[Any]) -> Iterator[tuple[Any, Any]]:
    """Decode batches from each request's first generated token to past its stored positions."""
    lengths = _lengths()
    longest = max(m.mrope_positions.shape[1] - n if m else 0 for m, n in zip(mms, lengths, strict=True))
    for generated in range(1, longest + 4):
        seq_lens = [n + generated for n in lengths]
        yield _batch(reqs, mms, [s - 1 for s in seq_lens], [1] * len(seq_lens))


@pytest.mark.parametrize("host", [True, False], ids=["host", "torch"])
def test_steps_are_sglangs(sglang_positions: Any, sglang_exec: None, host: bool) -> None:
    """Extend chunks (one ending inside the source image), then decode through the generation (SGLang's
    stored columns), its end marker and past it (the index), and the retracted request's re-prefill."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    reqs, mms = _requests(sglang_positions)
    lengths = _lengths()
    counts: dict[str, int] = {}
    table = _table(host, counts)
    runner = SimpleNamespace(device="cpu")
    for prefix in ([0] * 4, [4, 5, 0, 3]):
        extend = [n - p if p else min(n, 5) for n, p in zip(lengths, prefix, strict=True)]
        batch, fb = _batch(reqs, mms, prefix, extend)
        assert table.serves(batch)
        ForwardBatch._compute_mrope_positions_extend(fb, runner, batch)
        assert torch.equal(table.extend(fb, batch), fb.mrope_positions)
    assert counts == {"admitted": 4, "from_positions": 3}
    for batch, fb in _decodes(reqs, mms):
        ForwardBatch._compute_mrope_positions_decode(fb, runner, batch)
        assert torch.equal(table.decode(fb, batch), fb.mrope_positions), fb.seq_lens.tolist()
    assert not table.serves_speculative  # SGLang's speculative positions read no stored positions


def test_check_mode_steps_and_the_wrong_variant(
    sglang_positions: Any, sglang_exec: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The patched ``ForwardBatch`` methods in check mode on a model runner of GLM-Image (every step
    compared with SGLang's; speculative steps on SGLang's path); then the negative control: a table
    registered from positions of target grids in the wrong order fails the step comparison."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    reqs, mms = _requests(sglang_positions)
    lengths = _lengths()
    pool = SimpleNamespace(req_generation=torch.zeros(9, dtype=torch.int64))
    pool.req_generation[SLOTS] = 1
    runner = SimpleNamespace(
        device="cpu",
        model_config=SimpleNamespace(hf_config=transformers_config("glm_image")),  # CONFIG's ids
        req_to_token_pool=pool,
    )
    plugin.enable("check")
    batch, fb = _batch(reqs, mms, [0] * 4, lengths)
    fb.forward_mode = SimpleNamespace(is_decode=lambda: False, is_extend=lambda **kwargs: True)
    ForwardBatch._compute_mrope_positions(fb, runner, batch)
    for batch, fb in _decodes(reqs, mms):
        fb.forward_mode = SimpleNamespace(is_decode=lambda: True)
        ForwardBatch._compute_mrope_positions(fb, runner, batch)
    drafts = torch.tensor(lengths)[:, None] + torch.arange(2)
    ForwardBatch.compute_spec_mrope_positions(fb, runner, batch, drafts.reshape(-1))
    stats = plugin.stats()
    assert stats["checked_steps"] == stats["extend_steps"] + stats["decode_steps"] > 1
    assert stats["admitted"] == 4 and stats["fallback_steps"] == 1 and stats["spec_steps"] == 0

    _reversed_targets(monkeypatch)
    plugin.enable("mrope")
    _, wrong = _requests(served_function())
    plugin.disable()
    table = _table(True, {})
    (ours, ours_fb), (batch, fb) = (list(_decodes(reqs, stored))[3] for stored in (wrong, mms))
    assert table.serves(ours)
    ForwardBatch._compute_mrope_positions_decode(fb, runner, batch)  # from SGLang's stored positions
    with pytest.raises(MRopeError, match=r"request 'r0' \(slot 3\), column 0: t, h, w = "):
        RunnerTable.compare(table.decode(ours_fb, ours), fb.mrope_positions, batch, 1)
