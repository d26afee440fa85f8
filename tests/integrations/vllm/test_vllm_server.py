"""The README's command, run: vLLM's OpenAI server with ``MROPE_VLLM=1`` against one without it, driven by the
``openai`` client with image and video prompts (:mod:`support.serve_engines`, :mod:`support.servers`).

Each server (vLLM 0.32's CPU engine, its V1 model runner, the tiny Qwen2.5-VL) listens on a free port of
127.0.0.1 in a process group of its own; the module's fixture runs the two one after the other and stops
each (SIGTERM to the server, as a user's ``kill``), killing the group whatever happens. Checked: the greedy
tokens of every prompt, sent one at a time, equal without and with mrope; a burst of concurrent requests is
served in full; mrope's log lines (what it serves, its counters from the worker process) are there with the
plugin on and absent with it off (the negative control of the "plugin active" check); each server exits
on SIGTERM and leaves no process behind.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai  # a dependency of vLLM: present wherever these tests are collected
import pytest

from support import serve_engines as engines
from support import servers

MAX_TOKENS = 16
BURST = 8
STOP_TIMEOUT_S = 90.0


def prompts() -> dict[str, list[dict[str, Any]]]:
    """The chat prompts sent one at a time, by name: text only; an image (3 x 5 merged tokens); a video (8
    frames of 56 x 56 pixels at 2 fps: grid (4, 4, 4), 2 x 2 merged tokens per frame pair); an image and
    that video; ~70 words then an image (4 x 6 tokens)."""
    image = engines.image_url(3 * 28, 5 * 28, seed=1)
    video = engines.video_url(8, 2 * 28, 2 * 28, fps=2.0, seed=5)
    long_text = " ".join(["A photo of a cat, a dog and a bird on the table in the kitchen at night."] * 4)
    return {
        "text": engines.chat_messages("Tell me a story about the sea."),
        "image": engines.chat_messages("Describe the image.", [("image", image)]),
        "video": engines.chat_messages("What happens in the video?", [("video", video)]),
        "image_video": engines.chat_messages(
            "Compare them.", [("image", engines.image_url(3 * 28, 3 * 28, seed=7)), ("video", video)]
        ),
        "long_image": engines.chat_messages(
            long_text, [("image", engines.image_url(4 * 28, 6 * 28, seed=2))]
        ),
    }


def complete(client: Any, model: str, messages: list[dict[str, Any]]) -> list[int]:
    """The greedy token ids of one chat completion (``ignore_eos``: always :data:`MAX_TOKENS`)."""
    response = client.chat.completions.create(
        model=model,
        messages=messages,
        temperature=0,
        max_tokens=MAX_TOKENS,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    return list(response.choices[0].model_dump()["token_ids"])


def run_server(model_dir: Path, log_path: Path, plugin: str | None) -> dict[str, Any]:
    """One server (``MROPE_VLLM=plugin``, None: unset): tokens of each prompt, the burst's token counts, its
    log, exit status, stop time and leftover processes."""
    env = engines.server_env(engines.VLLM_ENV, plugin_var="MROPE_VLLM", plugin=plugin, interval_s=1)
    with servers.serve(engines.vllm_argv(model_dir), env, log_path) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=180)
        model = client.models.list().data[0].id
        return engines.exercise(
            server,
            lambda messages: complete(client, model, messages),
            prompts(),
            burst=BURST,
            served=plugin is not None,
            stop_timeout_s=STOP_TIMEOUT_S,
        )


@pytest.fixture(scope="module")
def runs(
    checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """Both servers' runs: ``"off"`` (no ``MROPE_VLLM``) then ``"on"`` (``MROPE_VLLM=1``)."""
    root = tmp_path_factory.mktemp("vllm-server")
    model_dir = engines.add_chat_template(
        Path(shutil.copytree(checkpoint("qwen2_5_vl"), root / "qwen2_5_vl"))
    )
    return {
        name: run_server(model_dir, root / f"{name}.log", plugin)
        for name, plugin in (("off", None), ("on", "1"))
    }


def test_greedy_tokens_equal(runs: dict[str, dict[str, Any]]) -> None:
    off, on = runs["off"]["tokens"], runs["on"]["tokens"]
    for name in off:
        assert len(off[name]) == MAX_TOKENS, name
        assert on[name] == off[name], f"{name}: {on[name]} with mrope, {off[name]} without"


def test_burst_served(runs: dict[str, dict[str, Any]]) -> None:
    for name, run in runs.items():
        assert run["burst"] == [MAX_TOKENS] * BURST, name


def test_plugin_active_in_worker(runs: dict[str, dict[str, Any]]) -> None:
    on = runs["on"]
    serving = engines.serving_lines(on["log"])
    assert any("the V1 model runner by mrope's qwen2_5_vl rule" in line for line in serving), serving
    assert any("audited release 0.32.0" in line for line in serving), serving
    workers = [c for c in engines.counters(on["log"]).values() if c.get("admitted")]
    assert len(workers) == 1, engines.counters(on["log"])
    (worker,) = workers
    assert worker["of"] == "the V1 model runner of vLLM" and worker["runner"] == "v1", worker
    assert worker["admitted"] == on["requests"], worker
    assert worker["steps"] >= MAX_TOKENS, worker
    assert worker["fallback_requests"] == 0 and worker["fallback_steps"] == 0, worker


def test_plugin_off_says_nothing(runs: dict[str, dict[str, Any]]) -> None:
    """The negative control: the same checks find nothing where the plugin is off."""
    off = runs["off"]["log"]
    assert engines.serving_lines(off) == []
    assert engines.counters(off) == {}
    assert "mrope" not in off


@pytest.mark.parametrize("name", ["off", "on"])
def test_clean_shutdown(runs: dict[str, dict[str, Any]], name: str) -> None:
    run = runs[name]
    assert run["returncode"] == 0, run["log"][-3000:]
    assert run["leftovers"] == [] and run["stop_s"] is not None, run["leftovers"]
    tail = run["log"].splitlines()[-200:]
    assert not [line for line in tail if "mrope" in line and ("ERROR" in line or "Traceback" in line)]
