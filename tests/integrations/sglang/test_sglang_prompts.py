"""The integration in this process, without an engine: SGLang's prompt-position functions served by
mrope give SGLang's own results (compared with SGLang's functions, which the patch leaves in their
module), check mode raises on a difference, the audit refuses other code, the entry point acts only
when asked, and disable() restores SGLang."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mrope  # noqa: E402
from mrope import MRopeError  # noqa: E402
from mrope.integrations import _sglang_audit  # noqa: E402
from mrope.integrations import sglang as plugin  # noqa: E402
from support import tiny_vlms as tiny  # noqa: E402
from support.tiny_vlms import Image, Video  # noqa: E402

TEXT = [5, 6, 7]
# prompts as each family's processor lays them out: images, videos (Qwen2.5-VL: scaled time whose
# temporal extent passes the spatial one), mixed
PARTS = {
    "images": [TEXT, Image(3, 5), TEXT, Image(2, 2), TEXT],
    "video": [TEXT, Video(8, 2, 2, seconds=2.0), TEXT],
    "mixed": [TEXT, Image(2, 3), [9] * 40, Video(3, 4, 6, seconds=0.7), TEXT, Image(1, 1)],
    "text": [TEXT * 5],
}
QWEN = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


@pytest.fixture
def served() -> Iterator[None]:
    plugin.disable()
    plugin.reset_stats()
    plugin.enable("mrope")
    yield
    plugin.disable()
    plugin.reset_stats()


def _prompt(model_type: str, parts: list[Any]) -> tuple[Any, dict[str, Any]]:
    config = tiny.tiny_config(model_type, vision={"tokens_per_second": 2})
    ids, images, videos, seconds, _ = tiny.layout(model_type, config, parts)
    grids = {
        "image_grid_thw": torch.tensor(images) if images else None,
        "video_grid_thw": torch.tensor(videos) if videos else None,
    }
    if model_type == "qwen2_5_vl" and seconds:
        grids["second_per_grid_ts"] = torch.tensor(seconds, dtype=torch.float32)
    return config, {"input_ids": torch.tensor([ids]), **grids}


def _qwen_args(model_type: str, config: Any) -> tuple[Any, ...]:
    merge = config.vision_config.spatial_merge_size
    tps = 2 if model_type == "qwen2_5_vl" else None
    return merge, config.image_token_id, config.video_token_id, config.vision_start_token_id, model_type, tps


@pytest.mark.parametrize("name", sorted(PARTS))
@pytest.mark.parametrize("model_type", QWEN)
def test_get_rope_index_is_sglangs(served: None, model_type: str, name: str) -> None:
    from sglang.srt.layers.rotary_embedding import mrope_rope_index
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding

    config, inputs = _prompt(model_type, PARTS[name])
    args = _qwen_args(model_type, config)
    expected = mrope_rope_index.get_rope_index(
        *args, **{k: (v.clone() if v is not None else v) for k, v in inputs.items()}
    )
    got = MRotaryEmbedding.get_rope_index(*args, **inputs)
    assert got[0].dtype == expected[0].dtype and torch.equal(got[0], expected[0]), (model_type, name)
    assert torch.equal(got[1].reshape(-1), expected[1].reshape(-1).to(got[1].dtype))
    assert plugin.stats()["prompts"] == 1 and plugin.stats()["fallback_prompts"] == 0


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl"])
@given(
    sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=3),
    gaps=st.lists(st.integers(0, 6), min_size=4, max_size=4),
)
def test_image_prompts_are_sglangs(model_type: str, sizes: list[tuple[int, int]], gaps: list[int]) -> None:
    """Prompts of images only (the images found by a scan and placed as items), against SGLang's
    function: random sizes, text between them (or none)."""
    from sglang.srt.layers.rotary_embedding import mrope_rope_index
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding

    parts: list[Any] = [[5] * gaps[0]] if gaps[0] else []
    for (height, width), gap in zip(sizes, gaps[1:], strict=False):
        parts += [Image(height, width)] + ([[6] * gap] if gap else [])
    config, inputs = _prompt(model_type, parts)
    args = _qwen_args(model_type, config)
    expected = mrope_rope_index.get_rope_index(*args, **{k: v for k, v in inputs.items() if v is not None})
    plugin.enable("mrope")
    try:
        plugin.reset_stats()
        got = MRotaryEmbedding.get_rope_index(*args, **inputs)
        assert plugin.stats()["prompts"] == 1 and plugin.stats()["fallback_prompts"] == 0
    finally:
        plugin.disable()
    assert torch.equal(got[0], expected[0]), (model_type, parts)
    assert torch.equal(got[1].reshape(-1), expected[1].reshape(-1).to(got[1].dtype))


@pytest.mark.parametrize("name", ["images", "video", "mixed"])
def test_get_rope_index_glm4v_is_sglangs(served: None, name: str) -> None:
    from sglang.srt.layers.rotary_embedding import mrope_rope_index
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding

    config, inputs = _prompt("glm4v", PARTS[name])
    args = (inputs["input_ids"], config, inputs["image_grid_thw"], inputs["video_grid_thw"], None)
    expected = mrope_rope_index.get_rope_index_glm4v(*args)
    got = MRotaryEmbedding.get_rope_index_glm4v(*args)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1].reshape(-1), expected[1].reshape(-1))
    assert plugin.stats()["prompts"] == 1


def test_other_models_keep_sglangs_function(served: None) -> None:
    from sglang.srt.layers.rotary_embedding import mrope_rope_index
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding

    config, inputs = _prompt("qwen2_vl", PARTS["images"])
    args = (*_qwen_args("qwen2_vl", config)[:4], "paddleocr_vl", 2)
    expected = mrope_rope_index.get_rope_index(*args, **inputs)
    got = MRotaryEmbedding.get_rope_index(*args, **inputs)
    assert torch.equal(got[0], expected[0])
    assert plugin.stats()["prompts"] == 0 and plugin.stats()["fallback_prompts"] == 1


@pytest.mark.parametrize("name", ["images", "mixed"])
def test_check_mode_raises_on_a_different_prompt(
    served: None, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Negative control: mrope's prompt positions shifted by one on the h row, on either path (images
    only: :func:`mrope.families.find_image_positions`; with a video: the family's positions)."""
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding

    plugin.enable("check")
    config, inputs = _prompt("qwen2_5_vl", PARTS[name])
    owner: Any = plugin if name == "images" else type(mrope.from_config(config))
    attribute = "find_image_positions" if name == "images" else "positions"
    served_function = getattr(owner, attribute)

    def shifted(*args: Any, **kwargs: Any) -> Any:
        positions, delta = served_function(*args, **kwargs)
        positions[1, -2] += 1
        return positions, delta

    monkeypatch.setattr(owner, attribute, shifted)
    with pytest.raises(MRopeError, match=r"mrope check: qwen2_5_vl prompt \(row 0 of the batch\), column"):
        MRotaryEmbedding.get_rope_index(*_qwen_args("qwen2_5_vl", config), **inputs)


def test_prompt_exception_falls_back(served: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.layers.rotary_embedding import mrope_rope_index
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken")

    config, inputs = _prompt("qwen2_5_vl", PARTS["mixed"])
    monkeypatch.setattr(type(mrope.from_config(config)), "positions", broken)
    args = _qwen_args("qwen2_5_vl", config)
    got = MRotaryEmbedding.get_rope_index(*args, **inputs)
    assert torch.equal(got[0], mrope_rope_index.get_rope_index(*args, **inputs)[0])
    assert plugin.stats()["fallback_prompts"] == 1 and plugin.stats()["prompts"] == 0


def test_disable_restores_sglang(served: None) -> None:
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    assert plugin.is_enabled() == "mrope" and hasattr(Scheduler, plugin.STATS_RPC)
    plugin.disable()
    assert plugin.is_enabled() is None and not hasattr(Scheduler, plugin.STATS_RPC)
    for method in (ForwardBatch._compute_mrope_positions, MRotaryEmbedding.get_rope_index):
        assert method.__module__.startswith("sglang."), method.__module__


def test_audit_accepts_the_installed_release() -> None:
    release, differing = _sglang_audit.installed_release()
    assert (release, differing) == ("0.5.23", [])


def test_audit_refuses_other_code(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    plugin.disable()
    target = _sglang_audit.TARGETS[0]
    changed = {release: {**digests, target: "0" * 64} for release, digests in _sglang_audit.AUDITED.items()}
    monkeypatch.setattr(_sglang_audit, "AUDITED", changed)
    with pytest.raises(MRopeError, match=f"differs from every audited release.*{target}"):
        plugin.enable()
    monkeypatch.setenv(plugin.ENV_VAR, "1")
    plugin.register()  # never raises: a warning, SGLang unchanged
    assert plugin.is_enabled() is None
    assert "SGLang's own M-RoPE path stays" in caplog.text


@pytest.mark.parametrize(("value", "mode"), [("", None), ("0", None), ("1", "mrope"), ("check", "check")])
def test_entry_point_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, mode: str | None
) -> None:
    plugin.disable()
    monkeypatch.setenv(plugin.ENV_VAR, value)
    try:
        plugin.register()
        assert plugin.is_enabled() == mode
    finally:
        plugin.disable()


def test_bad_mode() -> None:
    with pytest.raises(MRopeError, match="mode must be one of"):
        plugin.enable("fast")
