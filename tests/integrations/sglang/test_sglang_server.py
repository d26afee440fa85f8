"""SGLang's HTTP server with ``MROPE_SGLANG=1`` against one without it, driven through its ``/generate`` API
with image prompts (:mod:`support.serve_engines`, :mod:`support.servers`).

Each server (SGLang 0.5.23's CPU engine as ``make test`` sets it up, the tiny Qwen2.5-VL) listens on a free
port of 127.0.0.1 in a process group of its own; the module's fixture runs the two one after the other and
stops each (SIGTERM to the server), killing the group whatever happens. Checked: the greedy tokens of every
prompt, sent one at a time, equal without and with mrope; a burst of concurrent requests is served in
full; mrope's lines (what it serves in the tokenizer and scheduler processes, their counters) are there
with the plugin on and absent with it off (the negative control); each server exits on SIGTERM and leaves
no process behind. Videos are not sent: SGLang decodes them with torchcodec or decord, neither of which
this CPU set-up has (its offline-engine tests pass videos as stored positions instead).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support import serve_engines as engines
from support import servers

MAX_TOKENS = 16
BURST = 8
STOP_TIMEOUT_S = 90.0
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def prompts() -> dict[str, dict[str, Any]]:
    """``/generate`` bodies without sampling parameters, by name: text only; an image (3 x 5 merged tokens);
    ~70 words then an image (4 x 6 tokens: the first 256-token chunk holds it); two images."""
    long_text = " ".join(["A photo of a cat, a dog and a bird on the table in the kitchen at night."] * 4)
    return {
        "text": {"text": "Tell me a story about the sea."},
        "image": {
            "text": f"Describe the image. {IMAGE} What is in it?",
            "image_data": [engines.image_url(3 * 28, 5 * 28, seed=1)],
        },
        "long_image": {
            "text": f"{long_text} {IMAGE} Describe it.",
            "image_data": [engines.image_url(4 * 28, 6 * 28, seed=2)],
        },
        "two_images": {
            "text": f"Compare {IMAGE} left and {IMAGE} right.",
            "image_data": [
                engines.image_url(2 * 28, 3 * 28, seed=3),
                engines.image_url(4 * 28, 2 * 28, seed=4),
            ],
        },
    }


def generate(url: str, body: dict[str, Any]) -> list[int]:
    """The greedy token ids of one ``/generate`` request (``ignore_eos``: always :data:`MAX_TOKENS`)."""
    sampling = {"temperature": 0, "max_new_tokens": MAX_TOKENS, "ignore_eos": True}
    data = json.dumps({**body, "sampling_params": sampling}).encode()
    request = urllib.request.Request(
        url + "/generate", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=180) as response:
        return list(json.loads(response.read())["output_ids"])


def run_server(model_dir: Path, log_path: Path, plugin: str | None, cache: Path) -> dict[str, Any]:
    """One server (``MROPE_SGLANG=plugin``, None: unset): tokens of each prompt, the burst's token counts,
    its log, exit status, stop time and leftover processes."""
    env = engines.server_env(engines.SGLANG_ENV, plugin_var="MROPE_SGLANG", plugin=plugin, interval_s=1)
    env["SGLANG_CACHE_DIR"] = str(cache)
    with servers.serve(engines.sglang_argv(model_dir), env, log_path) as server:
        return engines.exercise(
            server,
            lambda body: generate(server.url, body),
            prompts(),
            burst=BURST,
            served=plugin is not None,
            stop_timeout_s=STOP_TIMEOUT_S,
        )


@pytest.fixture(scope="module")
def runs(
    checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """Both servers' runs: ``"off"`` (no ``MROPE_SGLANG``) then ``"on"`` (``MROPE_SGLANG=1``)."""
    root = tmp_path_factory.mktemp("sglang-server")
    model_dir = Path(shutil.copytree(checkpoint("qwen2_5_vl"), root / "qwen2_5_vl"))
    engines.add_chat_template(model_dir)  # SGLang's start-up warms a vision model up through its chat API
    plugins = (("off", None), ("on", "1"))
    return {
        name: run_server(model_dir, root / f"{name}.log", plugin, root / "cache") for name, plugin in plugins
    }


def test_greedy_tokens_equal(runs: dict[str, dict[str, Any]]) -> None:
    off, on = runs["off"]["tokens"], runs["on"]["tokens"]
    for name in off:
        assert len(off[name]) == MAX_TOKENS, name
        assert on[name] == off[name], f"{name}: {on[name]} with mrope, {off[name]} without"


def test_burst_served(runs: dict[str, dict[str, Any]]) -> None:
    for name, run in runs.items():
        assert run["burst"] == [MAX_TOKENS] * BURST, name


def test_plugin_active(runs: dict[str, dict[str, Any]]) -> None:
    on = runs["on"]
    serving = engines.serving_lines(on["log"])
    for what in ("prompt positions", "step positions"):
        assert any(f"M-RoPE {what} by mrope's qwen2_5_vl rule" in line for line in serving), (what, serving)
    assert all("audited release 0.5.23" in line for line in serving), serving
    found = {c["of"]: c for c in engines.counters(on["log"]).values()}
    steps, prompts_ = found["SGLang's step positions"], found["SGLang's prompt positions"]
    assert steps["admitted"] >= on["requests"], steps  # and SGLang's warm-up request
    assert steps["extend_steps"] > 0 and steps["decode_steps"] >= MAX_TOKENS, steps
    assert steps["fallback_requests"] == 0 and steps["fallback_steps"] == 0, steps
    assert prompts_["prompts"] >= on["requests"] - 1 and prompts_["fallback_prompts"] == 0, prompts_


def test_plugin_off_says_nothing(runs: dict[str, dict[str, Any]]) -> None:
    """The negative control: the same checks find nothing where the plugin is off."""
    off = runs["off"]["log"]
    assert engines.serving_lines(off) == []
    assert engines.counters(off) == {}
    assert "mrope" not in off


@pytest.mark.parametrize("name", ["off", "on"])
def test_clean_shutdown(runs: dict[str, dict[str, Any]], name: str) -> None:
    run = runs[name]
    assert run["leftovers"] == [] and run["stop_s"] is not None, run["leftovers"]
    assert run["returncode"] is not None, run["log"][-3000:]
    tail = run["log"].splitlines()[-200:]
    assert not [line for line in tail if "mrope" in line and ("ERROR" in line or "Traceback" in line)]
