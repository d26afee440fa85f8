"""Tiny randomly initialised vision-language checkpoints, built offline for vLLM's CPU backend.

Each builder writes a complete model folder (``config.json``, seeded random float32 weights in
``model.safetensors``, a byte-level BPE tokenizer built with the ``tokenizers`` library,
``preprocessor_config.json`` and ``video_preprocessor_config.json``) and returns its path. Nothing
is downloaded: the folders load with ``HF_HUB_OFFLINE=1``.

The tokenizer is trained on a fixed corpus (a few hundred tokens), the special tokens are appended
after it, and the config names their ids: ``config.json`` is written after the tokenizer. The
weights come from the transformers model class of the family (so the tensor names are exactly the
released checkpoints'), initialised under ``torch.manual_seed(seed)``.

Families (``FAMILIES``): ``qwen2_5_vl``, ``qwen3_vl``, ``glm4v``; and (``OMNI_FAMILIES``)
``qwen2_5_omni``, ``qwen3_omni_moe``: a whole Omni model's folder with thinker weights only, whose
``preprocessor_config.json`` also holds the Whisper feature extractor's fields and whose
``tokenizer_config.json`` names the processor's tokens. Use :func:`build` or the per-family
builders; :func:`special_ids` reads the ids back from a built folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAMILIES = ("qwen2_5_vl", "qwen3_vl", "glm4v")
OMNI_FAMILIES = ("qwen2_5_omni", "qwen3_omni_moe")  # thinkers with audio: prompts of their own

# Image processors: a merged token covers (patch * merge)^2 pixels; max_pixels keeps images small.
# Qwen2.5-VL / GLM-4.1V: patch 14 -> 28-pixel units; Qwen3-VL: patch 16 -> 32-pixel units.
MAX_IMAGE_TOKENS = 24  # merged tokens per image (per video frame pair) at most
MIN_IMAGE_TOKENS = 4
# Qwen3-VL's and GLM-4.1V's video processors budget the pixels of all frames together
# (frames * height * width <= longest_edge): room for 128 frame-tokens (64 merged video tokens).
MAX_VIDEO_FRAME_TOKENS = 128

_OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
_STANDARD_MEAN = [0.5, 0.5, 0.5]

# Fixed training text for the byte-level BPE: prompt words, digits and the timestamp formats the
# processors write ("<1.0 seconds>", "1.0 seconds", plain seconds), so they tokenize compactly.
_CORPUS = [
    "Describe the image. What is in the picture? Compare the two images and the video.",
    "A photo of a cat, a dog and a bird on the table in the kitchen at night.",
    "The quick brown fox jumps over the lazy dog. Please answer with one word.",
    "system user assistant You are a helpful assistant. Tell me a story about the sea.",
    "<0.0 seconds> <0.5 seconds> <1.0 seconds> <1.5 seconds> <2.0 seconds> <3.0 seconds>",
    "0.0 seconds 1.0 seconds 2.0 seconds 3.0 seconds 4.0 seconds 5.0 seconds 6 7 8 9 10 11 12",
    "one two three four five six seven eight nine ten red green blue left right top bottom",
]
_BPE_VOCAB = 360  # 256 byte symbols + merges (fewer if the corpus runs out of pairs)

# Sensitivity to positions. With transformers' init (std 0.02) attention is almost uniform and
# the h/w sections sit on slow frequencies, so wrong positions hardly change the greedy tokens.
# The builders sharpen attention (q and k projections scaled, or Qwen3's q/k norms) and use
# rope_theta 1e4: then copying the t row onto h and w changes the tokens of vision prompts.
ROPE_THETA = 10000.0
QK_PROJ_SCALE = 10.0
QK_NORM_SCALE = 3.0

QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
GLM_SPECIALS = [
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|image|>",
    "<|video|>",
]


def padded_vocab(n_tokens: int, multiple: int = 64) -> int:
    return -(-n_tokens // multiple) * multiple


def build_tokenizer(folder: Path, specials: list[str], *, eos: str, pad: str) -> dict[str, int]:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` (byte-level BPE, deterministic) into
    ``folder``; returns every special token's id. Also returns ``"__len__"``: the tokenizer size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_VOCAB,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    ids = {s: tok.token_to_id(s) for s in specials}
    ids["__len__"] = tok.get_vocab_size(with_added_tokens=True)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 32768,
        "eos_token": eos,
        "pad_token": pad,
        "bos_token": None,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "errors": "replace",
    }
    write_json(folder / "tokenizer_config.json", config)
    write_json(folder / "special_tokens_map.json", {"eos_token": eos, "pad_token": pad})
    return ids


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _save_weights(folder: Path, model_class: str, seed: int, *, submodel: str | None = None) -> None:
    """Instantiate ``transformers.<model_class>`` from the written config, seeded, float32, and save
    its state dict as ``model.safetensors``. ``submodel`` (e.g. ``"thinker"``): the class is built
    from that part of the config (``config.thinker_config``) and its tensor names get the prefix
    ``thinker.``, as in a whole Omni checkpoint."""
    import torch
    import transformers
    from safetensors.torch import save_file

    config = transformers.AutoConfig.from_pretrained(str(folder))
    if submodel is not None:
        config = getattr(config, f"{submodel}_config")
    cls = getattr(transformers, model_class)
    torch.manual_seed(seed)
    with torch.no_grad():
        model = cls(config).to(torch.float32).eval()
    prefix = f"{submodel}." if submodel else ""
    state = {prefix + name: t.detach().contiguous().clone() for name, t in model.state_dict().items()}
    sharpen(state)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def sharpen(state: dict[str, Any]) -> None:
    """Scale the text attention's q/k projection weights (or Qwen3's q/k RMSNorm weights) in place."""
    import re

    # "thinker.model.layers": an Omni thinker's text layers
    proj = re.compile(r"(?:language_model|thinker\.model)\.layers\.\d+\.self_attn\.[qk]_proj\.weight$")
    norm = re.compile(r"(?:language_model|thinker\.model)\.layers\.\d+\.self_attn\.[qk]_norm\.weight$")
    for name, tensor in state.items():
        if proj.search(name):
            tensor.mul_(QK_PROJ_SCALE)
        elif norm.search(name):
            tensor.mul_(QK_NORM_SCALE)


def write_generation_config(folder: Path, eos: list[int], pad: int) -> None:
    config = {"eos_token_id": eos, "pad_token_id": pad, "do_sample": False}
    write_json(folder / "generation_config.json", config)


def _qwen_image_processor(patch: int, processor_class: str, image_type: str, mean: list[float], std) -> dict:
    unit = patch * 2
    min_pixels, max_pixels = unit * unit * MIN_IMAGE_TOKENS, unit * unit * MAX_IMAGE_TOKENS
    return {
        "image_processor_type": image_type,
        "processor_class": processor_class,
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": mean,
        "image_std": std,
        "patch_size": patch,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "size": {"shortest_edge": min_pixels, "longest_edge": max_pixels},
    }


def qwen_text(model_type: str, ids: dict[str, int], **fields: Any) -> dict[str, Any]:
    """The tiny Qwen text config (hidden 128, 2 layers, 2 heads, 1 KV head), with the model's own
    ``fields``."""
    return {
        "model_type": model_type,
        "vocab_size": padded_vocab(ids["__len__"]),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": ROPE_THETA,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "torch_dtype": "float32",
        **fields,
    }


def _qwen_config(architecture: str, model_type: str, ids: dict[str, int]) -> dict[str, Any]:
    """The top of a tiny Qwen VLM's config.json: its architecture and placeholder token ids."""
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }


#: the tiny Qwen2.5 vision tower (Qwen2.5-VL's and the Qwen2.5-Omni thinker's; their time rates differ)
QWEN2_5_VISION: dict[str, Any] = {
    "depth": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "in_chans": 3,
    "in_channels": 3,
    "hidden_act": "silu",
    "out_hidden_size": 128,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "spatial_patch_size": 14,
    "window_size": 112,
    "fullatt_block_indexes": [1],
    "initializer_range": 0.02,
}
#: the tiny Qwen3 vision tower (Qwen3-VL's and the Qwen3-Omni thinker's)
QWEN3_VISION: dict[str, Any] = {
    "depth": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "in_channels": 3,
    "hidden_act": "gelu_pytorch_tanh",
    "out_hidden_size": 128,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 256,
    "deepstack_visual_indexes": [0, 1],
    "initializer_range": 0.02,
}
#: the Qwen2.5 text backbone's own fields (Qwen2.5-VL's and the Qwen2.5-Omni thinker's)
QWEN2_5_TEXT: dict[str, Any] = {
    "max_position_embeddings": 4096,
    "rope_scaling": {"type": "mrope", "rope_type": "default", "mrope_section": [8, 12, 12]},
    "use_sliding_window": False,
    "sliding_window": 4096,
    "max_window_layers": 2,
}


def qwen2_video_processor(image: dict[str, Any]) -> dict[str, Any]:
    """The Qwen2-VL video processor's config beside the image processor ``image``: its sizes, frames as
    given (no sampling)."""
    return {
        **{k: v for k, v in image.items() if k != "image_processor_type"},
        "video_processor_type": "Qwen2VLVideoProcessor",
        "min_frames": 2,
        "max_frames": 16,
        "do_sample_frames": False,
        "cap_pixels_per_frame": False,
    }


def build_qwen2_5_vl(folder: str | Path, seed: int = 0) -> Path:
    """Tiny Qwen2.5-VL: text hidden 128, 2 layers, 2 heads, 1 KV head, head_dim 64, chunked
    mrope_section [8, 12, 12]; vision depth 2, hidden 64, patch 14, merge 2, temporal patch 2,
    ``tokens_per_second`` 2 (as the released checkpoints)."""
    folder = Path(folder)
    ids = build_tokenizer(folder, QWEN_SPECIALS, eos="<|im_end|>", pad="<|endoftext|>")
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text = qwen_text("qwen2_5_vl_text", ids, **QWEN2_5_TEXT)
    config = {
        **_qwen_config("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", ids),
        "vision_token_id": ids["<|vision_pad|>"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": eos[0],
        # text fields at the top level as well, as the released config.json has them
        **{k: v for k, v in text.items() if k != "model_type"},
        "text_config": text,
        "vision_config": {"model_type": "qwen2_5_vl", **QWEN2_5_VISION, "tokens_per_second": 2},
    }
    write_json(folder / "config.json", config)
    processor = _qwen_image_processor(
        14, "Qwen2_5_VLProcessor", "Qwen2VLImageProcessor", _OPENAI_CLIP_MEAN, _OPENAI_CLIP_STD
    )
    write_json(folder / "preprocessor_config.json", processor)
    write_json(folder / "video_preprocessor_config.json", qwen2_video_processor(processor))
    write_generation_config(folder, eos, ids["<|endoftext|>"])
    _save_weights(folder, "Qwen2_5_VLForConditionalGeneration", seed)
    return folder


_NOT_FOR_VIDEO = ("image_processor_type", "min_pixels", "max_pixels")


def build_qwen3_vl(folder: str | Path, seed: int = 0) -> Path:
    """Tiny Qwen3-VL: text hidden 128, 2 layers, 2 heads, 1 KV head, head_dim 64, interleaved
    mrope_section [12, 10, 10] (the released [24, 20, 20] scaled to 32 frequencies); vision depth
    2, hidden 64, patch 16, merge 2, temporal patch 2, deepstack from vision blocks 0 and 1."""
    folder = Path(folder)
    ids = build_tokenizer(folder, QWEN_SPECIALS, eos="<|im_end|>", pad="<|endoftext|>")
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text = qwen_text(
        "qwen3_vl_text",
        ids,
        head_dim=64,
        max_position_embeddings=8192,
        rope_scaling={"rope_type": "default", "mrope_section": [12, 10, 10], "mrope_interleaved": True},
        attention_bias=False,
    )
    config = {
        **_qwen_config("Qwen3VLForConditionalGeneration", "qwen3_vl", ids),
        "text_config": text,
        "vision_config": {"model_type": "qwen3_vl", **QWEN3_VISION},
    }
    write_json(folder / "config.json", config)
    processor = _qwen_image_processor(
        16, "Qwen3VLProcessor", "Qwen2VLImageProcessorFast", _STANDARD_MEAN, _STANDARD_MEAN
    )
    write_json(folder / "preprocessor_config.json", processor)
    video = {
        **{k: v for k, v in processor.items() if k not in _NOT_FOR_VIDEO},
        "size": {
            "shortest_edge": 32 * 32 * MIN_IMAGE_TOKENS,
            "longest_edge": 32 * 32 * MAX_VIDEO_FRAME_TOKENS,
        },
        "video_processor_type": "Qwen3VLVideoProcessor",
        "fps": 2,
        "min_frames": 2,
        "max_frames": 16,
        "do_sample_frames": True,
        "cap_pixels_per_frame": False,
    }
    write_json(folder / "video_preprocessor_config.json", video)
    write_generation_config(folder, eos, ids["<|endoftext|>"])
    _save_weights(folder, "Qwen3VLForConditionalGeneration", seed)
    return folder


def build_glm4v(folder: str | Path, seed: int = 0) -> Path:
    """Tiny GLM-4.1V (``glm4v``): text hidden 256, 2 layers, 2 heads, 1 KV head (head 128),
    partial rotary 0.5 (64 rotary dims), chunked mrope_section [8, 12, 12], GPT-J pairs; vision
    depth 2, hidden 64, patch 14, merge 2, temporal patch 2."""
    folder = Path(folder)
    ids = build_tokenizer(folder, GLM_SPECIALS, eos="<|endoftext|>", pad="<|endoftext|>")
    vocab = padded_vocab(ids["__len__"])
    eos = [ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]]
    text = {
        "model_type": "glm4v_text",
        "vocab_size": vocab,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": ROPE_THETA,
        "partial_rotary_factor": 0.5,
        "rope_scaling": {"rope_type": "default", "type": "default", "mrope_section": [8, 12, 12]},
        "attention_bias": True,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "pad_token_id": ids["<|endoftext|>"],
        "eos_token_id": eos,
        "image_token_id": None,
        "video_token_id": None,
        "torch_dtype": "float32",
    }
    config = {
        "architectures": ["Glm4vForConditionalGeneration"],
        "model_type": "glm4v",
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "image_token_id": ids["<|image|>"],
        "video_token_id": ids["<|video|>"],
        "image_start_token_id": ids["<|begin_of_image|>"],
        "image_end_token_id": ids["<|end_of_image|>"],
        "video_start_token_id": ids["<|begin_of_video|>"],
        "video_end_token_id": ids["<|end_of_video|>"],
        "text_config": text,
        "vision_config": {
            "model_type": "glm4v",
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "in_channels": 3,
            "hidden_act": "silu",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "out_hidden_size": 256,
            "image_size": 336,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "rms_norm_eps": 1e-5,
            "initializer_range": 0.02,
        },
    }
    write_json(folder / "config.json", config)
    unit = 28
    # GLM's smart_resize counts the temporal patch (2) in the pixel budget of an image.
    pixels = unit * unit
    size = {"shortest_edge": 2 * pixels * MIN_IMAGE_TOKENS, "longest_edge": 2 * pixels * MAX_IMAGE_TOKENS}
    processor = {
        "image_processor_type": "Glm4vImageProcessor",
        "processor_class": "Glm4vProcessor",
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": _OPENAI_CLIP_MEAN,
        "image_std": _OPENAI_CLIP_STD,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "size": size,
    }
    write_json(folder / "preprocessor_config.json", processor)
    video = {
        **{k: v for k, v in processor.items() if k != "image_processor_type"},
        "size": {
            "shortest_edge": 2 * pixels * MIN_IMAGE_TOKENS,
            "longest_edge": pixels * MAX_VIDEO_FRAME_TOKENS,
        },
        "video_processor_type": "Glm4vVideoProcessor",
        "max_image_size": {"longest_edge": pixels * MAX_VIDEO_FRAME_TOKENS},
        "fps": 2,
        "num_frames": 16,
        "max_duration": 300,
        "do_sample_frames": True,
    }
    write_json(folder / "video_preprocessor_config.json", video)
    write_generation_config(folder, eos, ids["<|endoftext|>"])
    _save_weights(folder, "Glm4vForConditionalGeneration", seed)
    return folder


QWEN2_5_OMNI_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
    "<|vision_pad|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
]
# The tokenizer attributes Qwen2.5-Omni's processor reads (tokenizer_config.json, as released).
_QWEN2_5_OMNI_TOKEN_NAMES = {
    "image_token": "<|IMAGE|>",
    "audio_token": "<|AUDIO|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
# Whisper log-mel features: 16 kHz, 100 frames a second, 128 mel bins; padded to CHUNK seconds
# (the released 300 s would make every audio 30,000 frames before the mask trims it).
OMNI_SAMPLING_RATE = 16000
OMNI_AUDIO_CHUNK_SECONDS = 30


def whisper_features() -> dict[str, Any]:
    n_samples = OMNI_AUDIO_CHUNK_SECONDS * OMNI_SAMPLING_RATE
    return {
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": 128,
        "sampling_rate": OMNI_SAMPLING_RATE,
        "hop_length": 160,
        "n_fft": 400,
        "chunk_length": OMNI_AUDIO_CHUNK_SECONDS,
        "n_samples": n_samples,
        "nb_max_frames": n_samples // 160,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": True,
        "dither": 0.0,
    }


def omni_tokenizer(
    folder: Path, specials: list[str], names: dict[str, str], processor_class: str
) -> dict[str, int]:
    """:func:`build_tokenizer`, and ``tokenizer_config.json`` naming the tokens the Omni processors
    read as tokenizer attributes (``image_token``, ``audio_bos_token``, ...)."""
    ids = build_tokenizer(folder, specials, eos="<|im_end|>", pad="<|endoftext|>")
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    tok_config["extra_special_tokens"] = dict(names)
    tok_config["processor_class"] = processor_class
    write_json(folder / "tokenizer_config.json", tok_config)
    return ids


def build_qwen2_5_omni(folder: str | Path, seed: int = 0) -> Path:
    """Tiny Qwen2.5-Omni (``Qwen2_5OmniModel``, served by vLLM as its thinker): thinker text hidden
    128, 2 layers, 2 heads, 1 KV head, head_dim 64, chunked mrope_section [8, 12, 12]; vision depth
    2, hidden 64, patch 14, merge 2, temporal patch 2, ``tokens_per_second`` 25 (as released: the
    thinker's ``position_id_per_seconds``); audio encoder 2 layers, d_model 64, 128 mel bins,
    ``n_window`` 100; ``seconds_per_chunk`` 2. Only thinker weights (``thinker.*``) are written
    (``enable_audio_output`` false: no talker, no token2wav)."""
    folder = Path(folder)
    ids = omni_tokenizer(folder, QWEN2_5_OMNI_SPECIALS, _QWEN2_5_OMNI_TOKEN_NAMES, "Qwen2_5OmniProcessor")
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text = qwen_text("qwen2_5_omni_text", ids, **QWEN2_5_TEXT)
    thinker = {
        "model_type": "qwen2_5_omni_thinker",
        "architectures": ["Qwen2_5OmniThinkerForConditionalGeneration"],
        "audio_token_index": ids["<|AUDIO|>"],
        "image_token_index": ids["<|IMAGE|>"],
        "video_token_index": ids["<|VIDEO|>"],
        "audio_start_token_id": ids["<|audio_bos|>"],
        "audio_end_token_id": ids["<|audio_eos|>"],
        "vision_start_token_id": ids["<|vision_bos|>"],
        "vision_end_token_id": ids["<|vision_eos|>"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": eos[0],
        "pad_token_id": ids["<|endoftext|>"],
        "user_token_id": ids["<|im_start|>"],
        "position_id_per_seconds": 25,
        "seconds_per_chunk": 2,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "text_config": text,
        "vision_config": {
            "model_type": "qwen2_5_omni_vision_encoder",
            **QWEN2_5_VISION,
            "tokens_per_second": 25,
        },
        "audio_config": {
            "model_type": "qwen2_5_omni_audio_encoder",
            "num_mel_bins": 128,
            "encoder_layers": 2,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 128,
            "d_model": 64,
            "activation_function": "gelu",
            "scale_embedding": False,
            "max_source_positions": 1500,
            "n_window": 100,
            "output_dim": 128,
            "initializer_range": 0.02,
        },
    }
    image = _qwen_image_processor(
        14, "Qwen2_5OmniProcessor", "Qwen2VLImageProcessor", _OPENAI_CLIP_MEAN, _OPENAI_CLIP_STD
    )
    _write_omni(folder, "Qwen2_5OmniModel", "qwen2_5_omni", thinker, image, eos, ids["<|endoftext|>"])
    _save_weights(folder, "Qwen2_5OmniThinkerForConditionalGeneration", seed, submodel="thinker")
    return folder


def _write_omni(
    folder: Path,
    architecture: str,
    model_type: str,
    thinker: dict[str, Any],
    image: dict[str, Any],
    eos: list[int],
    pad: int,
) -> None:
    """An Omni checkpoint's files but the weights: its config (the thinker's, no audio output), one
    ``preprocessor_config.json`` holding the image processor's and the feature extractor's fields, the
    video processor's config and the generation config."""
    config = {
        "architectures": [architecture],
        "model_type": model_type,
        "torch_dtype": "float32",
        "enable_audio_output": False,
        "thinker_config": thinker,
    }
    write_json(folder / "config.json", config)
    write_json(folder / "preprocessor_config.json", {**image, **whisper_features()})
    write_json(folder / "video_preprocessor_config.json", qwen2_video_processor(image))
    write_generation_config(folder, eos, pad)


QWEN3_OMNI_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
_QWEN3_OMNI_TOKEN_NAMES = {
    "image_token": "<|image_pad|>",
    "audio_token": "<|audio_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}


#: the tiny Qwen3-Omni audio encoder (Qwen3-ASR's in vLLM is the same class)
QWEN3_OMNI_AUDIO: dict[str, Any] = {
    "num_mel_bins": 128,
    "encoder_layers": 2,
    "encoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "d_model": 64,
    "activation_function": "gelu",
    "scale_embedding": False,
    "max_source_positions": 1500,
    "n_window": 50,
    "n_window_infer": 800,
    "conv_chunksize": 500,
    "downsample_hidden_size": 32,
    "output_dim": 128,
    "initializer_range": 0.02,
}


def build_qwen3_omni(folder: str | Path, seed: int = 0) -> Path:
    """Tiny Qwen3-Omni (``Qwen3OmniMoeForConditionalGeneration``, served by vLLM as its thinker):
    thinker text hidden 128, 2 MoE layers (4 experts, 2 a token), 2 heads, 1 KV head, head_dim 64,
    interleaved mrope_section [12, 10, 10]; vision depth 2, hidden 64, patch 16, merge 2, deepstack
    from blocks 0 and 1; audio encoder 2 layers, d_model 64, ``n_window`` 50;
    ``position_id_per_seconds`` 13 (as released). Thinker weights only."""
    folder = Path(folder)
    ids = omni_tokenizer(folder, QWEN3_OMNI_SPECIALS, _QWEN3_OMNI_TOKEN_NAMES, "Qwen3OmniMoeProcessor")
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text = qwen_text(
        "qwen3_omni_moe_text",
        ids,
        head_dim=64,
        max_position_embeddings=8192,
        rope_scaling={
            "rope_type": "default",
            "mrope_section": [12, 10, 10],
            "mrope_interleaved": True,
            "interleaved": True,
        },
        attention_bias=False,
        moe_intermediate_size=64,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        norm_topk_prob=True,
        mlp_only_layers=[],
        sliding_window=None,
    )
    thinker = {
        "model_type": "qwen3_omni_moe_thinker",
        "audio_token_id": ids["<|audio_pad|>"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "audio_start_token_id": ids["<|audio_start|>"],
        "audio_end_token_id": ids["<|audio_end|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "user_token_id": ids["<|im_start|>"],
        "position_id_per_seconds": 13,
        "seconds_per_chunk": 2,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "text_config": text,
        "vision_config": {
            "model_type": "qwen3_omni_moe_vision_encoder",
            **QWEN3_VISION,
            # vLLM reads these two (released: 768 / 16 = 48 a side, 2304 position embeddings)
            "image_size": 256,
            "apply_vit_abs_pos_embed": True,
        },
        "audio_config": {"model_type": "qwen3_omni_moe_audio_encoder", **QWEN3_OMNI_AUDIO},
    }
    image = _qwen_image_processor(
        16, "Qwen3OmniMoeProcessor", "Qwen2VLImageProcessorFast", _STANDARD_MEAN, _STANDARD_MEAN
    )
    _write_omni(
        folder,
        "Qwen3OmniMoeForConditionalGeneration",
        "qwen3_omni_moe",
        thinker,
        image,
        eos,
        ids["<|endoftext|>"],
    )
    _save_weights(folder, "Qwen3OmniMoeThinkerForConditionalGeneration", seed, submodel="thinker")
    return folder


BUILDERS: dict[str, Callable[..., Path]] = {
    "qwen2_5_vl": build_qwen2_5_vl,
    "qwen3_vl": build_qwen3_vl,
    "glm4v": build_glm4v,
    "qwen2_5_omni": build_qwen2_5_omni,
    "qwen3_omni_moe": build_qwen3_omni,
}


def build(family: str, folder: str | Path, seed: int = 0) -> Path:
    """Build the tiny checkpoint of ``family`` (one of :data:`FAMILIES`, :data:`OMNI_FAMILIES` or
    :data:`support.checkpoints_vllm_only.VLLM_ONLY_FAMILIES`) in ``folder``."""
    from . import checkpoints_vllm_only

    builders = {**BUILDERS, **checkpoints_vllm_only.BUILDERS}
    try:
        builder = builders[family]
    except KeyError:
        raise ValueError(f"unknown family {family!r}; expected one of {tuple(builders)}") from None
    return builder(folder, seed=seed)


def special_ids(folder: str | Path) -> dict[str, int]:
    """Special token -> id, read back from a built folder's ``tokenizer.json``."""
    data = json.loads((Path(folder) / "tokenizer.json").read_text())
    return {t["content"]: t["id"] for t in data["added_tokens"]}


def read_config(folder: str | Path) -> dict[str, Any]:
    return json.loads((Path(folder) / "config.json").read_text())
