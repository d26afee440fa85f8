"""Hypothesis strategies for multimodal prompts in each family's token layout, and the peer comparisons.

A prompt is drawn as a batch of rows, each a list of items (image, video; Omni: audio, video with its
audio) separated by random text, then laid out in the family's own token layout (markers, per-frame
timestamps), padded left or right. The peers are called through :mod:`peers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

TEXT_IDS = (100, 1000)  # text tokens are drawn from here; every family's special ids lie outside
VIDEO_T = st.integers(1, 4)


@dataclass
class Prompt:
    """A batch in a family's layout: rows of ids (unpadded) and the items in batch order."""

    rows: list[list[int]]
    images: list[tuple[int, int, int]] = field(default_factory=list)
    videos: list[tuple[int, int, int]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    audio_seqlens: list[int] = field(default_factory=list)
    row_images: list[list[int]] = field(default_factory=list)  # per row: indices into images
    row_videos: list[list[int]] = field(default_factory=list)
    row_audios: list[list[int]] = field(default_factory=list)

    def padded(self, left: bool, extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(ids, attention_mask) of shape (B, max_len + extra), padding with id 0."""
        width = max(len(r) for r in self.rows) + extra
        ids = np.zeros((len(self.rows), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, r in enumerate(self.rows):
            sl = slice(width - len(r), width) if left else slice(0, len(r))
            ids[i, sl] = r
            mask[i, sl] = 1
        return ids, mask

    def grids(self, kind: str, index: list[int] | None = None) -> np.ndarray | None:
        items = getattr(self, kind)
        if index is not None:
            items = [items[i] for i in index]
        return np.array(items, dtype=np.int64).reshape(-1, 3) if items else None


def text(draw, low: int = 0, high: int = 4) -> list[int]:
    n = draw(st.integers(low, high))
    return draw(st.lists(st.integers(*TEXT_IDS), min_size=n, max_size=n))


def grid(draw, merge: int, t_values: st.SearchStrategy[int], max_side: int = 3) -> tuple[int, int, int]:
    return (draw(t_values), merge * draw(st.integers(1, max_side)), merge * draw(st.integers(1, max_side)))


@st.composite
def vision_prompts(
    draw,
    family,
    layout: str,
    *,
    max_rows: int = 3,
    max_items: int = 3,
    video_t: st.SearchStrategy[int] = VIDEO_T,
    seconds: bool = False,
) -> Prompt:
    """Rows of text, images and videos in ``layout``: ``"qwen2"`` (vision_start, pads, vision_end),
    ``"qwen3"`` (a video is per frame: timestamp text, vision_start, pads, vision_end), ``"glm"`` (video
    markers around per-frame image blocks and timestamps), ``"ernie"`` (image and video markers)."""
    merge = family.spatial_merge_size
    cfg = family.config
    prompt = Prompt(rows=[])
    for _ in range(draw(st.integers(1, max_rows))):
        row: list[int] = text(draw)
        imgs, vids = [], []
        for _ in range(draw(st.integers(0, max_items))):
            if draw(st.booleans()):
                g = grid(draw, merge, st.integers(1, 2))
                n = g[0] * g[1] * g[2] // merge**2
                imgs.append(len(prompt.images))
                prompt.images.append(g)
                if layout == "glm" or layout == "ernie":
                    row += (
                        [cfg["image_start_token_id"]]
                        + [family.image_token_id] * n
                        + [cfg["image_end_token_id"]]
                    )
                else:
                    row += (
                        [cfg["vision_start_token_id"]]
                        + [family.image_token_id] * n
                        + [cfg["vision_end_token_id"]]
                    )
            else:
                g = grid(draw, merge, video_t)
                plane = g[1] * g[2] // merge**2
                vids.append(len(prompt.videos))
                prompt.videos.append(g)
                if seconds:
                    prompt.seconds.append(draw(st.sampled_from([0.5, 1.0, 2.0, 0.1, 1 / 3, 4.0])))
                if layout == "qwen2":
                    row += [cfg["vision_start_token_id"]] + [family.video_token_id] * g[0] * plane
                    row += [cfg["vision_end_token_id"]]
                elif layout == "ernie":
                    frames = g[0] // family.temporal_merge_size
                    row += [cfg["video_start_token_id"]] + [family.video_token_id] * frames * plane
                    row += [cfg["video_end_token_id"]]
                elif layout == "qwen3":
                    for _ in range(g[0]):
                        row += text(draw, 1, 3) + [cfg["vision_start_token_id"]]
                        row += [family.video_token_id] * plane + [cfg["vision_end_token_id"]]
                else:  # glm
                    row.append(cfg["video_start_token_id"])
                    for _ in range(g[0]):
                        row += [cfg["image_start_token_id"]] + [family.image_token_id] * plane
                        row += [cfg["image_end_token_id"]] + text(draw, 1, 3)
                    row.append(cfg["video_end_token_id"])
            row += text(draw)
        if not row:
            row = text(draw, 1, 3)
        prompt.rows.append(row)
        prompt.row_images.append(imgs)
        prompt.row_videos.append(vids)
    return prompt


def assert_same(ours, theirs, what: str) -> None:
    """Element-for-element equality of positions (or deltas), with the first mismatch in the message."""
    from peers import as_numpy

    a, b = as_numpy(ours), as_numpy(theirs)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != peer's {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != peer's {b.dtype}"
    bad = np.argwhere(a != b)
    assert bad.size == 0, (
        f"{what}: {len(bad)} mismatches, first at {tuple(bad[0])}: {a[tuple(bad[0])]} != {b[tuple(bad[0])]}"
    )


def check_against_transformers(model_type: str, prompt: Prompt, *, left: bool, extra: int = 0, **kw) -> None:
    """mrope (compat="transformers") and transformers' get_rope_index on the padded batch."""
    import torch

    import mrope
    from peers import transformers_config, transformers_rope_index

    config = transformers_config(model_type)
    family = mrope.from_config(config, compat="transformers")
    ids, mask = prompt.padded(left, extra)
    images, videos = prompt.grids("images"), prompt.grids("videos")
    ours = mrope.get_rope_index(
        family,
        torch.from_numpy(ids),
        image_grid_thw=images,
        video_grid_thw=videos,
        attention_mask=torch.from_numpy(mask),
        **kw,
    )
    theirs = transformers_rope_index(
        family,
        config,
        torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        image_grid_thw=None if images is None else torch.from_numpy(images),
        video_grid_thw=None if videos is None else torch.from_numpy(videos),
    )
    assert_same(ours[0], theirs[0], f"{model_type} positions")
    assert_same(ours[1], theirs[1], f"{model_type} deltas")


def check_against_sglang(model_type: str, prompt: Prompt, **kw) -> None:
    """mrope (compat="vllm") and SGLang, row by row (SGLang takes no padding)."""
    import torch

    import mrope
    from peers import sglang_rope_index, transformers_config

    family = mrope.from_config(transformers_config(model_type), compat="vllm")
    for r, row in enumerate(prompt.rows):
        ids = torch.tensor([row], dtype=torch.long)
        images = prompt.grids("images", prompt.row_images[r])
        videos = prompt.grids("videos", prompt.row_videos[r])
        ours = family.positions(row, image_grid_thw=images, video_grid_thw=videos, **kw)
        theirs = sglang_rope_index(
            family,
            ids,
            image_grid_thw=None if images is None else torch.from_numpy(images),
            video_grid_thw=None if videos is None else torch.from_numpy(videos),
        )
        assert_same(ours[0], theirs[0][:, 0], f"{model_type} row {r} positions")
        assert ours[1] == int(theirs[1][0, 0]), (
            f"{model_type} row {r} delta {ours[1]} != SGLang's {theirs[1]}"
        )


def require_sglang() -> None:
    """Skip unless SGLang is installed (fail under CI); its position module is loaded by path, since the
    sglang package's own imports need its serving stack."""
    from _peers import require

    require("sglang")


SECONDS = (0.5, 1.0, 2.0, 0.1, 1 / 3, 4.0, 0.7, 2.7, 5.5)


@st.composite
def omni_prompts(
    draw, family, *, use_audio_in_video: bool, max_rows: int = 3, max_items: int = 3, max_seqlen: int = 400
) -> Prompt:
    """Rows of text, images, videos (with their audio when ``use_audio_in_video``) and audios in the Omni
    layout; ``seconds`` always has one value per video."""
    merge = family.spatial_merge_size
    vs, ve, aus = family.vision_start_token_id, family.vision_start_token_id + 1, family.audio_start_token_id
    aue = aus + 1
    min_seqlen = int(np.argmax(family.audio_tokens(np.arange(20)) > 0))

    def audio_item():
        seqlen = draw(st.integers(min_seqlen, max_seqlen))
        prompt.audio_seqlens.append(seqlen)
        return int(family.audio_tokens(np.array([seqlen]))[0])

    prompt = Prompt(rows=[])
    for _ in range(draw(st.integers(1, max_rows))):
        row: list[int] = text(draw)
        imgs, vids, auds = [], [], []
        for _ in range(draw(st.integers(0, max_items))):
            kind = draw(st.sampled_from(["image", "video", "audio"]))
            if kind == "image":
                g = grid(draw, merge, st.integers(1, 2))
                imgs.append(len(prompt.images))
                prompt.images.append(g)
                row += [vs] + [family.image_token_id] * (g[0] * g[1] * g[2] // merge**2) + [ve]
            elif kind == "audio":
                auds.append(len(prompt.audio_seqlens))
                row += [aus] + [family.audio_token_id] * audio_item() + [aue]
            else:
                g = grid(draw, merge, st.integers(1, 5))
                vids.append(len(prompt.videos))
                prompt.videos.append(g)
                prompt.seconds.append(float(np.float32(draw(st.sampled_from(SECONDS)))))
                video = [family.video_token_id] * (g[0] * g[1] * g[2] // merge**2)
                if use_audio_in_video:
                    auds.append(len(prompt.audio_seqlens))
                    row += [vs, aus] + video + [family.audio_token_id] * audio_item() + [aue, ve]
                else:
                    row += [vs] + video + [ve]
            row += text(draw)
        if not row:
            row = text(draw, 1, 3)
        prompt.rows.append(row)
        prompt.row_images.append(imgs)
        prompt.row_videos.append(vids)
        prompt.row_audios.append(auds)
    return prompt


def omni_inputs(prompt: Prompt, r: int | None = None, *, torch_tensors: bool = False) -> dict:
    """Grids, seconds and audio lengths of the batch (or of row ``r``), as keyword arguments."""
    import torch

    pick = (lambda items, idx: items) if r is None else (lambda items, idx: [items[i] for i in idx[r]])
    images = pick(prompt.images, prompt.row_images)
    videos = pick(prompt.videos, prompt.row_videos)
    seconds = pick(prompt.seconds, prompt.row_videos)
    seqlens = pick(prompt.audio_seqlens, prompt.row_audios)
    kw = {
        "image_grid_thw": np.array(images, dtype=np.int64).reshape(-1, 3) if images else None,
        "video_grid_thw": np.array(videos, dtype=np.int64).reshape(-1, 3) if videos else None,
        "second_per_grid_ts": np.array(seconds, dtype=np.float32) if seconds else None,
        "audio_seqlens": np.array(seqlens, dtype=np.int64) if seqlens else None,
    }
    if torch_tensors:
        kw = {k: None if v is None else torch.from_numpy(v) for k, v in kw.items()}
    return kw


def check_omni_against_transformers(config, prompt: Prompt, *, use_audio_in_video: bool, left: bool) -> None:
    """mrope and transformers' Omni ``get_rope_index`` on the padded batch; padded slots are not compared
    (transformers leaves 1 in them, mrope 0: README convention table)."""
    import torch

    import mrope
    from peers import as_numpy, transformers_rope_index

    family = mrope.from_config(config, compat="transformers")
    model_type = family.model_type
    ids, mask = prompt.padded(left)
    ours = mrope.get_rope_index(
        family,
        torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        use_audio_in_video=use_audio_in_video,
        **omni_inputs(prompt),
    )
    theirs = transformers_rope_index(
        family,
        config,
        torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        use_audio_in_video=use_audio_in_video,
        **omni_inputs(prompt, torch_tensors=True),
    )
    keep = mask.astype(bool)
    assert_same(as_numpy(ours[0])[:, keep], as_numpy(theirs[0])[:, keep], f"{model_type} positions")
    ours_delta, their_delta = as_numpy(ours[1]), as_numpy(theirs[1])
    if not prompt.images and not prompt.videos:
        # transformers' 1-D path (no vision input) takes the max over padded slots too (they hold 1), so a
        # padded row of text and audio gets delta 1; mrope gives 0 (README convention table)
        padded = ~keep.all(axis=1)
        assert (ours_delta[padded] == 0).all()
        ours_delta, their_delta = ours_delta[~padded], their_delta[~padded]
    assert_same(ours_delta, their_delta, f"{model_type} deltas")


def check_omni_against_sglang(config, prompt: Prompt, *, use_audio_in_video: bool) -> None:
    """mrope (compat="vllm") and SGLang's Qwen3-Omni position code, row by row."""
    import torch

    import mrope
    from peers import sglang_rope_index

    family = mrope.from_config(config, compat="vllm")
    for r, row in enumerate(prompt.rows):
        ours = family.positions(row, use_audio_in_video=use_audio_in_video, **omni_inputs(prompt, r))
        theirs = sglang_rope_index(
            family,
            torch.tensor([row], dtype=torch.long),
            use_audio_in_video=use_audio_in_video,
            **omni_inputs(prompt, r, torch_tensors=True),
        )
        their_positions, their_delta = theirs[0][:, 0], theirs[1][0, 0]
        if not prompt.row_images[r] and not prompt.row_videos[r]:  # SGLang's text path returns int64
            their_positions, their_delta = their_positions.float(), their_delta.float()
        assert_same(ours[0], their_positions, f"{family.model_type} row {r} positions")
        assert_same(np.float32(ours[1]), their_delta, f"{family.model_type} row {r} delta")
