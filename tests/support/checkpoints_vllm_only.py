"""Tiny random checkpoints of the families whose only peer is vLLM (``VLLM_ONLY_FAMILIES``), built
offline for vLLM's CPU backend as :mod:`support.checkpoints` builds the Qwen-VL ones.

- ``qwen3_asr``: Qwen3-ASR as released (``Qwen3ASRForConditionalGeneration``, vLLM's own config class
  ``Qwen3ASRConfig`` with a ``thinker_config``): a Qwen3-Omni audio encoder and a dense Qwen3 text model
  whose rotary is M-RoPE (interleaved sections), every token positioned in order on all three rows.
  transformers ships a Qwen3-ASR model of another layout, so the weights come from the two parts'
  transformers classes (``Qwen3OmniMoeAudioEncoder``, ``Qwen3ForCausalLM``) under the tensor names vLLM
  loads (``thinker.audio_tower.*``, ``thinker.model.*``, ``thinker.lm_head.*``). The processor is
  transformers' ``Qwen3ASRProcessor`` (what vLLM asks for), the tokenizer names its audio tokens.
- ``minicpmv4_6``: MiniCPM-V 4.6 (transformers' ``MiniCPMV4_6ForConditionalGeneration``, config and
  processor), every token in order on all three rows of its Qwen3.5 backbone: one Gated-DeltaNet layer
  and one full-attention layer. vLLM's CPU Gated-DeltaNet kernel takes bfloat16 only and heads of 128:
  the engine runs it in bfloat16 (``support.vllm_harness.FAMILY_ENGINE_DEFAULTS``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import checkpoints as base

VLLM_ONLY_FAMILIES = ("qwen3_asr", "minicpmv4_6")

QWEN3_ASR_SPECIALS = base.QWEN3_OMNI_SPECIALS[:6]  # the text and audio tokens, in the same order
_QWEN3_ASR_TOKEN_NAMES = {
    "audio_token": "<|audio_pad|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}


def _save_parts(folder: Path, parts: list[tuple[type, Any, str]], seed: int) -> None:
    """Save the seeded random weights of ``parts`` (transformers model class, its config, tensor-name
    prefix) as one ``model.safetensors``, the text attention sharpened as in :mod:`support.checkpoints`."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    state: dict[str, Any] = {}
    for model_class, config, prefix in parts:
        with torch.no_grad():
            model = model_class(config).to(torch.float32).eval()
        state.update({prefix + k: t.detach().contiguous().clone() for k, t in model.state_dict().items()})
    base.sharpen(state)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def build_qwen3_asr(folder: str | Path, seed: int = 0) -> Path:
    """Tiny Qwen3-ASR: text hidden 128, 2 layers, 2 heads, 1 KV head, head_dim 64, interleaved
    mrope_section [12, 10, 10]; audio encoder 2 layers, d_model 64, 128 mel bins, ``n_window`` 50 (the
    Whisper features padded to 30 s, as :mod:`support.checkpoints`' Omni builders)."""
    import transformers
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as omni

    folder = Path(folder)
    ids = base.omni_tokenizer(folder, QWEN3_ASR_SPECIALS, _QWEN3_ASR_TOKEN_NAMES, "Qwen3ASRProcessor")
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text = base.qwen_text(
        "qwen3_asr_text",
        ids,
        head_dim=64,
        max_position_embeddings=4096,
        rope_scaling={"rope_type": "default", "mrope_section": [12, 10, 10], "mrope_interleaved": True},
        attention_bias=False,
    )
    config = {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "torch_dtype": "float32",
        "thinker_config": {
            "model_type": "qwen3_asr_thinker",
            "audio_token_id": ids["<|audio_pad|>"],
            "audio_start_token_id": ids["<|audio_start|>"],
            "audio_end_token_id": ids["<|audio_end|>"],
            "user_token_id": ids["<|im_start|>"],
            "initializer_range": 0.02,
            "torch_dtype": "float32",
            "text_config": text,
            "audio_config": {"model_type": "qwen3_asr_audio_encoder", **base.QWEN3_OMNI_AUDIO},
        },
    }
    base.write_json(folder / "config.json", config)
    features = {**base.whisper_features(), "processor_class": "Qwen3ASRProcessor"}
    base.write_json(folder / "preprocessor_config.json", features)
    base.write_generation_config(folder, eos, ids["<|endoftext|>"])
    text_config = transformers.Qwen3Config(**{k: v for k, v in text.items() if k != "model_type"})
    audio_config = transformers.Qwen3OmniMoeAudioEncoderConfig(**base.QWEN3_OMNI_AUDIO)
    parts = [
        (omni.Qwen3OmniMoeAudioEncoder, audio_config, "thinker.audio_tower."),
        (transformers.Qwen3ForCausalLM, text_config, "thinker."),
    ]
    _save_parts(folder, parts, seed)
    return folder


MINICPMV4_6_TOKEN_NAMES = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "image_start_token": "<image>",
    "image_end_token": "</image>",
    "slice_start_token": "<slice>",
    "slice_end_token": "</slice>",
    "image_id_start_token": "<image_id>",
    "image_id_end_token": "</image_id>",
}


def build_minicpmv4_6(folder: str | Path, seed: int = 0) -> Path:
    """Tiny MiniCPM-V 4.6: Qwen3.5 text hidden 128, 2 layers (Gated-DeltaNet, then full attention), 2
    heads, 1 KV head, head_dim 64, rotary half of it, interleaved mrope_section [6, 5, 5]; SigLIP vision
    2 layers, hidden 64, patch 14, images scaled to 224 pixels without slices (16 tokens: 16x merge)."""
    import transformers

    folder = Path(folder)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *MINICPMV4_6_TOKEN_NAMES.values()]
    ids = base.omni_tokenizer(folder, specials, MINICPMV4_6_TOKEN_NAMES, "MiniCPMV4_6Processor")
    rope = {
        "rope_type": "default",
        "rope_theta": base.ROPE_THETA,
        "mrope_section": [6, 5, 5],
        "mrope_interleaved": True,
        "partial_rotary_factor": 0.5,
    }
    text = {
        "model_type": "qwen3_5_text",
        "vocab_size": base.padded_vocab(ids["__len__"]),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "layer_types": ["linear_attention", "full_attention"],
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 2,
        "linear_key_head_dim": 128,  # vLLM's CPU Gated-DeltaNet kernel takes 128 only
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "max_position_embeddings": 4096,
        "rope_parameters": rope,
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "tie_word_embeddings": False,
    }
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": 224,
        "patch_size": 14,
    }
    config = transformers.MiniCPMV4_6Config(
        text_config=text,
        vision_config=vision,
        insert_layer_id=0,
        image_size=224,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        architectures=["MiniCPMV4_6ForConditionalGeneration"],
    )
    config.torch_dtype = "float32"
    config.save_pretrained(folder)
    processor = {
        "image_processor_type": "MiniCPMV4_6ImageProcessor",
        "processor_class": "MiniCPMV4_6Processor",
        "scale_resolution": 224,
        "max_slice_nums": 1,
        "patch_size": 14,
        "slice_mode": False,
        "downsample_mode": "16x",
        "use_image_id": True,
    }
    base.write_json(folder / "preprocessor_config.json", processor)
    video = {**processor, "image_processor_type": None, "video_processor_type": "MiniCPMV4_6VideoProcessor"}
    base.write_json(folder / "video_preprocessor_config.json", video)
    base.write_generation_config(folder, [ids["<|im_end|>"], ids["<|endoftext|>"]], ids["<|endoftext|>"])
    _save_parts(folder, [(transformers.MiniCPMV4_6ForConditionalGeneration, config, "")], seed)
    return folder


BUILDERS: dict[str, Callable[..., Path]] = {"qwen3_asr": build_qwen3_asr, "minicpmv4_6": build_minicpmv4_6}
