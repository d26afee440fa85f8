"""Tiny, randomly initialised transformers VLMs of every family mrope supports, and prompts for them.

A model is built from its default config shrunk to one layer, hidden size 32, a one-block vision tower
and a 256-token vocabulary; its special token ids are moved to 232..255 (so that nothing can find them
but by reading the config). Prompts are laid out as each family's processor lays them out, with the
processor's other outputs (``mm_token_type_ids``, seconds per grid, pixel tensors of the right size).
GLM-Image, which generates images, is built apart (:func:`tiny_glm_image`, :func:`glm_image_inputs`).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import mrope

VOCAB = 256
HIDDEN, HEADS, HEAD_DIM = 32, 2, 16
INIT_RANGE = 1.0
TEXT_IDS = (3, 200)  # plain text ids; 0 pads, special ids are 232..255
TOKEN_KEYS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "image_start_token_id",
    "image_end_token_id",
    "video_start_token_id",
    "video_end_token_id",
    "audio_token_id",
    "audio_start_token_id",
    "audio_end_token_id",
    "image_token_index",
    "video_token_index",
    "audio_token_index",
    "im_start_id",  # HunYuan-VL's image markers
    "im_end_id",
    "im_newline_id",
)

# model_type -> (transformers module, ...ForConditionalGeneration class, prompt layout)
#   "whole": vision_start, pads, vision_end (a video: all frames in one block)
#   "frames": a video is per frame: timestamp text, vision_start, pads, vision_end
#   "glm": image_start, pads, image_end; a video: video_start, per frame an image block and a timestamp,
#          video_end
#   "ernie": image and video markers around the pads; a video has T / temporal_merge_size frames
#   "hunyuan": images only: im_start, H' * (W' + 1) + 2 pads (a newline pad ends each merged row, and the
#              run's first and last pads are the vision tower's begin and end), im_end
MODELS = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLForConditionalGeneration", "whole"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", "whole"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLForConditionalGeneration", "frames"),
    "glm4v": ("glm4v", "Glm4vForConditionalGeneration", "glm"),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "frames"),
    "glm4v_moe": ("glm4v_moe", "Glm4vMoeForConditionalGeneration", "glm"),
    "glm46v": ("glm46v", "Glm46VForConditionalGeneration", "glm"),
    "glm_ocr": ("glm_ocr", "GlmOcrForConditionalGeneration", "glm"),
    "qwen3_5": ("qwen3_5", "Qwen3_5ForConditionalGeneration", "frames"),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", "frames"),
    "qwen4_exp": ("qwen4_exp", "Qwen4ExpForConditionalGeneration", "frames"),
    "cosmos3_edge": ("cosmos3_edge", "Cosmos3EdgeForConditionalGeneration", "frames"),
    "cosmos3_omni": ("cosmos3_omni", "Cosmos3OmniForConditionalGeneration", "frames"),
    "cohere_compass": ("cohere_compass", "CohereCompassForConditionalGeneration", "frames"),
    "paddleocr_vl": ("paddleocr_vl", "PaddleOCRVLForConditionalGeneration", "whole"),
    "ernie4_5_vl_moe": ("ernie4_5_vl_moe", "Ernie4_5_VLMoeForConditionalGeneration", "ernie"),
    "qwen2_5_omni_thinker": ("qwen2_5_omni", "Qwen2_5OmniThinkerForConditionalGeneration", "whole"),
    "qwen3_omni_moe_thinker": ("qwen3_omni_moe", "Qwen3OmniMoeThinkerForConditionalGeneration", "whole"),
    "hunyuan_vl": ("hunyuan_vl", "HunYuanVLForConditionalGeneration", "hunyuan"),
}
OMNI = ("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker")
#: the models that take images only (no video_grid_thw)
IMAGES_ONLY = ("paddleocr_vl", "hunyuan_vl")
#: mrope_section of the models whose number of position rows is its length: HunYuan-VL's four rows (index,
#: width, height, image ordinal), as in its checkpoints; every other model's is (t, h, w) = [3, 3, 2]
MROPE_SECTIONS = {"hunyuan_vl": [2, 2, 2, 2]}
MAIN = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v")


def _text_config(default: dict[str, Any]) -> dict[str, Any]:
    text = {
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": 0,
        # large random weights: sharp attention, so that the tokens depend on the positions (with the
        # default 0.02 the attention is near uniform and a wrong position rarely changes a token)
        "initializer_range": INIT_RANGE,
    }
    rope = dict(default.get("rope_parameters") or {})
    rope.setdefault("rope_type", "default")
    rope.setdefault("rope_theta", 10000.0)
    if "partial_rotary_factor" in rope:
        rope["partial_rotary_factor"] = 1.0  # every frequency rotates: all three axes reach the attention
    # sections (t, h, w) of the HEAD_DIM / 2 frequencies; Ernie needs its first two equal
    rope["mrope_section"] = [3, 3, 2]
    # per-layer-type rope parameters (Cohere Compass): the same for every type
    text["rope_parameters"] = (
        {"full_attention": rope} if "layer_types" in default and not default.get("rope_parameters") else rope
    )
    small = {
        "num_experts": 4,
        "num_local_experts": 4,
        "n_routed_experts": 4,
        "moe_num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_k": 2,
        "moe_num_shared_experts": 1,
        "n_shared_experts": 1,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 2,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "first_k_dense_replace": 0,
        "indexer_n_heads": 2,  # Qwen4-Exp: its attention layers are indexed
        "indexer_kv_heads": 1,
        "indexer_head_dim": HEAD_DIM,
        "indexer_budget": 64,
        "indexer_compress_ratio": 4,
        "vision_vocab_size": VOCAB,  # GLM-Image: its lm_head's size (the tokens it generates)
    }
    text.update({k: v for k, v in small.items() if k in default})
    if "moe_intermediate_size" in default:
        text["moe_intermediate_size"] = [32, 32] if isinstance(default["moe_intermediate_size"], list) else 32
    if "layer_types" in default:
        text["layer_types"] = ["full_attention"]  # the one layer attends (hybrid models: not linear)
    if default.get("sliding_window"):
        text["sliding_window"] = 64
    return text


def _vision_config(default: dict[str, Any]) -> dict[str, Any]:
    small = {
        "depth": 1,
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "embed_dim": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "num_attention_heads": 2,
        "patch_size": 2,
        "out_hidden_size": HIDDEN,
        "deepstack_visual_indexes": [0],
        "window_size": 8,
        "fullatt_block_indexes": [0],
        "num_position_embeddings": 64,
        "image_size": 16,
        "num_patches": 64,
        "text_hidden_size": HIDDEN,  # HunYuan-VL: its merger projects into the text model
        "max_image_size": 32,  # HunYuan-VL: its learned position grid, (32 / patch_size)^2
    }
    return {k: v for k, v in small.items() if k in default}


_AUDIO = {
    "num_mel_bins": 8,
    "encoder_layers": 1,
    "encoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "d_model": 16,
    "output_dim": HIDDEN,
    "downsample_hidden_size": 8,
}


def tiny_config(
    model_type: str, *, keep_token_ids: bool = False, vision: dict[str, Any] | None = None, **settings: Any
) -> Any:
    """The default transformers config of ``model_type``, shrunk; special token ids at 232..255, or, with
    ``keep_token_ids``, the released ones (for benchmarks on the real prompts: the ids then lie past the
    tiny vocabulary, so such a model computes positions but cannot embed its prompts). ``vision``:
    vision_config settings (e.g. ``tokens_per_second``); ``settings``: top-level ones (Omni thinkers:
    ``position_id_per_seconds``)."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type).to_dict()
    kwargs: dict[str, Any] = {
        "text_config": _text_config(default["text_config"]),
        "vision_config": {**_vision_config(default["vision_config"]), **(vision or {})},
        **settings,
    }
    if "audio_config" in default:
        kwargs["audio_config"] = dict(_AUDIO)
    if model_type in MROPE_SECTIONS:
        rope = kwargs["text_config"]["rope_parameters"]
        rope["mrope_section"] = list(MROPE_SECTIONS[model_type])
    if "projector_hidden_size" in default:
        kwargs["projector_hidden_size"] = 64
    keys = [k for k in TOKEN_KEYS if k in default]
    if keep_token_ids:
        if model_type in OMNI:  # the thinker config lacks vision_start_token_id; transformers reads it
            kwargs["vision_start_token_id"] = mrope.from_config(default).vision_start_token_id
    else:
        if model_type in OMNI:
            keys.append("vision_start_token_id")
        kwargs.update({key: VOCAB - len(keys) + i for i, key in enumerate(keys)})
    return AutoConfig.for_model(model_type, **kwargs)


# whole models around a thinker (not among MODELS: built by the tests that need them)
WHOLE_MODELS = {"qwen2_5_omni_whole": ("qwen2_5_omni", "Qwen2_5OmniForConditionalGeneration", "whole")}


def model_class(model_type: str) -> type:
    module, name, _ = MODELS.get(model_type) or WHOLE_MODELS[model_type]
    return getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)


@functools.cache
def tiny_model(model_type: str) -> Any:
    """A tiny ``...ForConditionalGeneration`` of ``model_type`` in eval mode (built once per session:
    callers must leave it unpatched)."""
    torch.manual_seed(0)
    model = model_class(model_type)(tiny_config(model_type)).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    return model


# GLM-Image (not among MODELS: it generates images, from a text prompt or a source image, so the shared
# prompts and scenarios do not apply): its vector quantiser shrunk, the codebook ids (a source image's
# tokens, embedded by the text model) below the special ids, the latent channels the vision tower's width
GLM_IMAGE_VQ = {"embed_dim": 16, "num_embeddings": 128, "latent_channels": 32}


@functools.cache
def tiny_glm_image() -> Any:
    """A tiny ``GlmImageForConditionalGeneration`` in eval mode, vision tower and quantiser shrunk too
    (built once per session: callers must leave it unpatched)."""
    from transformers.models.glm_image.modeling_glm_image import GlmImageForConditionalGeneration

    torch.manual_seed(0)
    model = GlmImageForConditionalGeneration(tiny_config("glm_image", vq_config=dict(GLM_IMAGE_VQ))).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    return model


#: MiniCPM-V 4.7's token ids in the tiny vocabulary (its config has none by default)
MINICPMV4_7_IDS = dict(
    zip(
        ("image_token_id", "video_token_id", "image_start_id", "image_end_id", "slice_start_id")
        + ("slice_end_id", "newline_id"),
        range(VOCAB - 16, VOCAB - 9),
        strict=True,
    )
)


@functools.cache
def tiny_minicpmv4_7() -> Any:
    """A tiny ``MiniCPMV4_7ForConditionalGeneration`` in eval mode (its Qwen3.5 text model of one full
    attention layer; built once per session: callers must leave it unpatched). Its prompts carry no
    pixels: the placeholders keep their token embeddings, their positions come from ``target_sizes``."""
    from transformers import AutoConfig
    from transformers.models.minicpmv4_7.modeling_minicpmv4_7 import MiniCPMV4_7ForConditionalGeneration

    default = AutoConfig.for_model("minicpmv4_7").to_dict()
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = AutoConfig.for_model(
        "minicpmv4_7",
        text_config=_text_config(default["text_config"]),
        vision_config=vision,
        insert_layer_id=0,
        **MINICPMV4_7_IDS,
    )
    torch.manual_seed(0)
    model = MiniCPMV4_7ForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    return model


@dataclass(frozen=True)
class Image:
    """An image of merged size H' x W'."""

    height: int
    width: int


@dataclass(frozen=True)
class Video:
    """A video of T frames (after temporal patching) of merged size H' x W', ``seconds`` per frame step."""

    frames: int
    height: int
    width: int
    seconds: float = 0.5


@dataclass(frozen=True)
class Audio:
    """An audio of ``seqlen`` feature frames (Omni thinkers)."""

    seqlen: int


@dataclass(frozen=True)
class VideoWithAudio:
    """A video with its audio track (Omni thinkers, ``use_audio_in_video=True``)."""

    video: Video
    audio: Audio


def _video_id(config: Any) -> int | None:
    """The video token id, or None for a model without videos (HunYuan-VL)."""
    if getattr(config, "video_token_id", None) is None and getattr(config, "video_token_index", None) is None:
        return None
    return _ids(config, "video_token_id")


def _ids(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    if value is None:
        value = getattr(config, name.replace("_id", "_index"))
    return int(value)


def layout(
    model_type: str, config: Any, parts: list[Any]
) -> tuple[list[int], list[list[int]], list[list[int]], list[float]]:
    """``(ids, image grids, video grids, seconds)`` of ``parts`` (text id lists, :class:`Image`,
    :class:`Video`) as the family's processor lays them out."""
    kind = MODELS[model_type][2]
    merge = config.vision_config.spatial_merge_size
    temporal = getattr(config.vision_config, "temporal_merge_size", 1)
    image, video = _ids(config, "image_token_id"), _video_id(config)
    if kind in ("glm", "ernie"):
        start, end = _ids(config, "image_start_token_id"), _ids(config, "image_end_token_id")
    elif kind == "hunyuan":
        start, end = config.im_start_id, config.im_end_id
    else:
        start = _ids(config, "vision_start_token_id")
        end = getattr(config, "vision_end_token_id", None) or 1  # Omni: any text token closes a block
    ids: list[int] = []
    images: list[list[int]] = []
    videos: list[list[int]] = []
    seconds: list[float] = []
    audios: list[int] = []

    def audio_pads(audio: Audio) -> list[int]:  # as many as the audio encoder outputs
        audios.append(audio.seqlen)
        count = int(mrope.from_config(config).audio_tokens(np.array([audio.seqlen]))[0])
        return [_ids(config, "audio_token_id")] * count

    for part in parts:
        if isinstance(part, Audio):
            ids += [config.audio_start_token_id] + audio_pads(part) + [1]  # any text token closes it
        elif isinstance(part, VideoWithAudio):
            frames, plane = part.video.frames, part.video.height * part.video.width
            videos.append([frames, part.video.height * merge, part.video.width * merge])
            seconds.append(part.video.seconds)
            ids += [start, config.audio_start_token_id] + [video] * (frames * plane)
            ids += audio_pads(part.audio) + [1, end]
        elif isinstance(part, Image):
            images.append([1, part.height * merge, part.width * merge])
            pads = part.height * (part.width + 1) + 2 if kind == "hunyuan" else part.height * part.width
            ids += [start] + [image] * pads + [end]
        elif isinstance(part, Video):
            if video is None:
                raise ValueError(f"{model_type} takes no videos")
            videos.append([part.frames * temporal, part.height * merge, part.width * merge])
            seconds.append(part.seconds)
            plane = part.height * part.width
            if kind == "whole":
                ids += [start] + [video] * (part.frames * plane) + [end]
            elif kind == "ernie":
                ids += (
                    [config.video_start_token_id]
                    + [video] * (part.frames * plane)
                    + [config.video_end_token_id]
                )
            elif kind == "frames":
                for k in range(part.frames):
                    ids += [TEXT_IDS[0] + k, TEXT_IDS[0] + 1] + [start] + [video] * plane + [end]
            else:
                ids.append(config.video_start_token_id)
                for k in range(part.frames):
                    ids += [start] + [image] * plane + [end, TEXT_IDS[0] + k]
                ids.append(config.video_end_token_id)
        else:
            ids += list(part)
    return ids, images, videos, seconds, audios


def token_types(model_type: str, config: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """The processor's ``mm_token_type_ids``: 0 text, 1 image, 2 video (GLM: image pads inside video
    markers are video)."""
    image, video = _ids(config, "image_token_id"), _video_id(config)
    if video is None:
        return (input_ids == image).int()
    if MODELS[model_type][2] == "glm":
        depth = torch.cumsum(
            (input_ids == config.video_start_token_id).long()
            - (input_ids == config.video_end_token_id).long(),
            dim=1,
        )
        pads = input_ids == image
        return (pads & (depth <= 0)).int() + 2 * (pads & (depth > 0)).int()
    return (input_ids == image).int() + 2 * (input_ids == video).int()


def _pixels(config: Any, grids: list[list[int]]) -> torch.Tensor:
    vision = config.vision_config
    channels = getattr(vision, "in_channels", None) or getattr(vision, "num_channels", 3)
    width = channels * getattr(vision, "temporal_patch_size", 1) * vision.patch_size**2
    patches = sum(t * h * w for t, h, w in grids)
    return torch.randn(patches, width, generator=torch.Generator().manual_seed(1))


def processor_output(
    model_type: str, rows: list[list[Any]], *, left: bool = True, pixels: bool = True
) -> dict:
    """What the family's processor returns for a batch of ``rows`` (each a list of parts), padded left
    (as for generation) or right, with ids 0 in padded slots."""
    config = tiny_config_of(model_type)
    laid = [layout(model_type, config, parts) for parts in rows]
    width = max(len(ids) for ids, *_ in laid)
    input_ids = torch.zeros(len(rows), width, dtype=torch.int64)
    mask = torch.zeros_like(input_ids)
    for r, (ids, *_) in enumerate(laid):
        cols = slice(width - len(ids), width) if left else slice(0, len(ids))
        input_ids[r, cols] = torch.tensor(ids)
        mask[r, cols] = 1
    images = [g for _, grids, *_ in laid for g in grids]
    videos = [g for _, _, grids, *_ in laid for g in grids]
    seconds = [s for *_, secs, _ in laid for s in secs]
    audios = [n for *_, seqlens in laid for n in seqlens]
    # pixel tensors where their shape is the common (patches, channels * patch volume) one; GLM's vision
    # tower counts a video's frames as images, PaddleOCR-VL's takes 5-D pixels
    kind = MODELS[model_type][2]
    pixels = pixels and model_type != "paddleocr_vl" and not (kind == "glm" and videos)
    out: dict[str, Any] = {"input_ids": input_ids, "attention_mask": mask}
    if model_type not in OMNI:
        out["mm_token_type_ids"] = token_types(model_type, config, input_ids)
    if images:
        out["image_grid_thw"] = torch.tensor(images)
        if pixels:
            out["pixel_values"] = _pixels(config, images)
    if videos:
        out["video_grid_thw"] = torch.tensor(videos)
        if pixels:
            out["pixel_values_videos"] = _pixels(config, videos)
        if model_type == "qwen2_5_vl":
            out["second_per_grid_ts"] = torch.tensor(seconds, dtype=torch.float32)
        elif model_type in OMNI:
            out["video_second_per_grid"] = torch.tensor(seconds, dtype=torch.float32)
    if audios:  # the Omni processor's feature mask: one row per audio, its length in ones
        frames = torch.arange(max(audios))
        out["feature_attention_mask"] = (frames[None] < torch.tensor(audios)[:, None]).long()
        out["use_audio_in_video"] = any(isinstance(p, VideoWithAudio) for parts in rows for p in parts)
    return out


@functools.cache
def tiny_config_of(model_type: str) -> Any:
    return tiny_model(model_type).config


def glm_image_inputs(rows: list[tuple[list[Any], list[tuple[int, int]]]]) -> dict:
    """GLM-Image's processor output for a left-padded batch: each row is its prompt parts (text id lists,
    source :class:`Image` s of H x W tokens) and its target grids (H, W) (text-to-image: two, the last
    generated first; image-to-image: one). The prompt ends with ``image_start``, the generation's start;
    pixel values come with source images (transformers takes each row's grids but its last as sources)."""
    config = tiny_glm_image().config
    start, end, image = config.image_start_token_id, config.image_end_token_id, config.image_token_id
    prompts, grids, counts, sources = [], [], [], []
    for parts, targets in rows:
        ids: list[int] = []
        for part in parts:
            if isinstance(part, Image):
                ids += [start] + [image] * (part.height * part.width) + [end]
                sources.append([1, part.height, part.width])
                grids.append(sources[-1])
            else:
                ids += list(part)
        grids += [[1, h, w] for h, w in targets]
        counts.append(sum(isinstance(p, Image) for p in parts) + len(targets))
        prompts.append(ids + [start])
    width = max(map(len, prompts))
    input_ids = torch.tensor([[0] * (width - len(ids)) + ids for ids in prompts])
    out = {
        "input_ids": input_ids,
        "attention_mask": (
            torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts])[:, None]
        ).long(),
        "image_grid_thw": torch.tensor(grids),
        "images_per_sample": torch.tensor(counts),
    }
    if sources:
        out["pixel_values"] = _pixels(config, sources)
    return out
