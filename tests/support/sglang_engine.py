"""SGLang's offline engine on a tiny checkpoint, run in a subprocess: tokens and mrope's counters as JSON.

``python sglang_engine.py SPEC.json`` runs, one after another in that process, the engines the spec lists
(each a ``mode``: ``"0"`` SGLang alone, ``"1"`` mrope, ``"check"``) on the same prompts, two rounds per
engine (the second after the first finished: its requests reuse the first's slots and hit the radix
cache through an image), and prints one line ``RESULT {json}``. A scheduler that raises (check mode's
negative control) ends the process: its output names the error.

Prompts (:func:`prompts`): an image, text only, ~40 text tokens then an image of 4 x 6 tokens (with
``chunked_prefill_size`` 32 the first chunk ends inside the image), two images, more text; the second
round repeats the long prompt's text and image with another ending, and the first image prompt.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

RESULT_MARKER = "RESULT "
MAX_NEW_TOKENS = 16
CHUNK = 32

ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "TORCHDYNAMO_DISABLE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
}

ENGINE_ARGS: dict[str, Any] = {
    "device": "cpu",
    "dtype": "float32",
    "attention_backend": "torch_native",
    "sampling_backend": "pytorch",
    "disable_cuda_graph": True,
    "max_total_tokens": 4096,
    "context_length": 2048,
    "mem_fraction_static": 0.05,
    "random_seed": 0,
    "chunked_prefill_size": CHUNK,
    "log_level": "error",
}

_LONG_TEXT = (
    "You are a helpful assistant. The quick brown fox jumps over the lazy dog. "
    "A photo of a cat, a dog and a bird on the table."
)


def unit(model_type: str) -> int:
    """Pixels per merged vision token along one side (patch size times merge 2)."""
    return 32 if model_type.startswith("qwen3") else 28


def image(model_type: str, height: int, width: int, seed: int) -> Any:
    """A random image of ``height`` x ``width`` merged tokens (a PIL image)."""
    from PIL import Image

    u = unit(model_type)
    pixels = np.random.default_rng(seed).integers(0, 256, (height * u, width * u, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def prompts(model_type: str) -> list[list[tuple[str, list[Any]]]]:
    """Two rounds of ``(text, images)`` prompts (see the module docstring)."""
    if model_type.startswith("glm"):
        img = "<|begin_of_image|><|image|><|end_of_image|>"
    else:
        img = "<|vision_start|><|image_pad|><|vision_end|>"
    first = (f"Describe the image. {img} What is in the picture?", [image(model_type, 3, 5, seed=1)])
    long_image = image(model_type, 4, 6, seed=2)
    round1 = [
        first,
        ("The quick brown fox jumps over the lazy dog. Tell me a story about the sea.", []),
        (f"{_LONG_TEXT} {img} Describe the image.", [long_image]),
        (
            f"Compare {img} left and {img} right: one word.",
            [image(model_type, 2, 3, 3), image(model_type, 4, 2, 4)],
        ),
        ("Count from one to ten, then back.", []),
    ]
    round2 = [(f"{_LONG_TEXT} {img} Now say what is missing.", [long_image]), first]
    return [round1, round2]


def released_names(folder: Path) -> None:
    """Rename a tiny Qwen2.5-VL's weights to the released checkpoints' names (``model.layers.*``,
    ``visual.*``), which SGLang's loader expects (transformers 5 writes ``model.language_model.*`` and
    ``model.visual.*``)."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    renamed = {}
    for name, tensor in load_file(path).items():
        for old, new in (("model.language_model.", "model."), ("model.visual.", "visual.")):
            if name.startswith(old):
                name = new + name[len(old) :]
        renamed[name] = tensor
    save_file(renamed, path, metadata={"format": "pt"})


def run_engine(model_dir: str, model_type: str, mode: str, stats_path: Path) -> dict[str, Any]:
    """One engine in ``mode``: its tokens per round, the second round's cached tokens, the counters of
    this (tokenizer) process and of the scheduler process."""
    import sglang

    from mrope.integrations import sglang as plugin

    os.environ[plugin.ENV_VAR] = mode
    plugin.disable()
    plugin.reset_stats()
    plugin.register()  # as SGLang's entry point does (SGLang loads plugins once per process)
    engine = sglang.Engine(model_path=model_dir, **ENGINE_ARGS)
    try:
        tokens, cached = [], []
        for batch in prompts(model_type):
            outputs = engine.generate(
                [text for text, _ in batch],
                {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True},
                image_data=[images for _, images in batch],
            )
            tokens.append([list(out["output_ids"]) for out in outputs])
            cached.append([int(out["meta_info"].get("cached_tokens", 0)) for out in outputs])
        scheduler = None
        if plugin.is_enabled():
            engine.collective_rpc(plugin.STATS_RPC, path=str(stats_path))
            scheduler = json.loads(stats_path.read_text())["stats"]
    finally:
        engine.shutdown()
    return {"mode": mode, "tokens": tokens, "cached": cached, "main": plugin.stats(), "scheduler": scheduler}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    results = [
        run_engine(spec["model_dir"], spec["model_type"], mode, Path(spec_path).with_suffix(f".{i}.stats"))
        for i, mode in enumerate(spec["modes"])
    ]
    print(RESULT_MARKER + json.dumps(results), flush=True)


if __name__ == "__main__":
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    main(sys.argv[1])
