"""mrope.show (the picture of a prompt's positions) and the ``mrope show`` command (mrope.cli).

The pictures are checked as files (PNG, size, dimensions, many distinct colors); what they draw comes
from :func:`mrope.show.prompt_runs`, which is checked against the prompts' own grids, and the command's
prompt layouts are checked against the test suite's prompt builder (strategies.build_prompt).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import mrope
from _peers import FAMILY_SETUPS, require, transformers_config
from mrope.cli import build_prompt as cli_prompt
from mrope.cli import load_prompt, main
from mrope.show import prompt_runs, show
from strategies import EDGE_LAYOUTS, Image, Video, build_prompt, edge_layout

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.json"))
QWEN2_5_VL = {
    "model_type": "qwen2_5_vl",
    "settings": {"image_token_id": 151655, "video_token_id": 151656, "spatial_merge_size": 2},
}


@pytest.fixture
def matplotlib_image():
    """matplotlib.image (the tests that draw skip without matplotlib)."""
    pytest.importorskip("matplotlib")
    import matplotlib.image

    return matplotlib.image


def check_picture(path: Path, image_module) -> np.ndarray:
    """The PNG at ``path`` is a plausible picture: a PNG file of sensible size and dimensions whose
    pixels are far from blank; returns its pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert 20_000 < len(data) < 5_000_000, f"{path}: {len(data)} bytes"
    pixels = image_module.imread(path)
    height, width = pixels.shape[:2]
    assert 1200 <= width <= 2500 and 700 <= height <= 2000, f"{path}: {width} x {height}"
    rgb = (pixels[..., :3] * 255).astype(np.int64)
    colors = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert len(colors) > 50, f"{path}: only {len(colors)} distinct colors"
    white = np.all(pixels[..., :3] > 0.97, axis=-1).mean()
    assert 0.3 < white < 0.97, f"{path}: {white:.0%} of the pixels are white"
    return pixels


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_example_pictures(example: Path, tmp_path: Path, matplotlib_image) -> None:
    """Every prompt file of the docs draws."""
    prompt = load_prompt(example)
    out = show(prompt.family, prompt.input_ids, **prompt.inputs, path=tmp_path / "one.png")
    assert out == tmp_path / "one.png"
    check_picture(out, matplotlib_image)


def test_compare_highlights_differences(tmp_path: Path, matplotlib_image) -> None:
    """compare=True adds the difference strip, and where the conventions differ the tokens are shaded
    (reddish pixels) and marked."""
    prompt = load_prompt(EXAMPLES / "conventions.json")
    vllm, _ = prompt.family.with_compat("vllm").positions(prompt.input_ids, **prompt.inputs)
    hf, _ = prompt.family.with_compat("transformers").positions(prompt.input_ids, **prompt.inputs)
    assert (vllm != hf).any(), "the example must be one where the conventions differ"

    def reddish(pixels: np.ndarray) -> float:
        rgb = pixels[..., :3]
        return float(((rgb[..., 0] > 0.95) & (rgb[..., 1] < 0.93) & (rgb[..., 1] > 0.8)).mean())

    one = show(prompt.family, prompt.input_ids, **prompt.inputs, path=tmp_path / "one.png")
    both = show(prompt.family, prompt.input_ids, **prompt.inputs, path=tmp_path / "both.png", compare=True)
    one_pixels, both_pixels = check_picture(one, matplotlib_image), check_picture(both, matplotlib_image)
    assert both_pixels.shape[0] > one_pixels.shape[0], "compare mode adds the difference strip"
    assert reddish(both_pixels) > 0.01 > reddish(one_pixels)


def check_runs(family: mrope.Family, prompt) -> None:
    """The runs cover the prompt once, in order, and name each grid's frames: image ``i`` has its T
    frames numbered 1..T, video ``i`` its T / temporal_merge_size."""
    ids = np.asarray(prompt.input_ids)
    table, _ = family.segments(prompt.input_ids, **prompt.kwargs())
    runs = prompt_runs(family, ids, table, prompt.image_grid_thw or None, prompt.video_grid_thw or None, None)
    assert runs.start[0] == 0 and runs.end[-1] == len(ids)
    np.testing.assert_array_equal(runs.start[1:], runs.end[:-1])
    assert (runs.end > runs.start).all()
    temporal = family.settings.get("temporal_merge_size", 1)
    for kind, grids, merge in (
        ("image", prompt.image_grid_thw, 1),
        ("video", prompt.video_grid_thw, temporal),
    ):
        for number, grid in enumerate(grids, 1):
            own = (runs.kind == kind) & (runs.item == number)
            frames = np.unique(runs.frame[own])
            np.testing.assert_array_equal(
                frames, np.arange(1, grid[0] // merge + 1), err_msg=f"{kind} {number}"
            )
            # a frame's pieces hold its H' * W' tokens
            plane = grid[1] * grid[2] // family.spatial_merge_size**2
            sizes = np.bincount(runs.frame[own], weights=(runs.end - runs.start)[own])[1:]
            np.testing.assert_array_equal(sizes, plane, err_msg=f"{kind} {number} frame sizes")
        assert not ((runs.kind == kind) & (runs.item > len(grids))).any()


@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
@pytest.mark.parametrize("name", [n for n, s in FAMILY_SETUPS.items() if s.edge_layouts])
def test_runs_name_every_frame(name: str, layout: str) -> None:
    require("transformers")
    family = mrope.from_config(transformers_config(FAMILY_SETUPS[name]))
    check_runs(family, edge_layout(family, layout))


@pytest.mark.parametrize("name", [n for n, s in FAMILY_SETUPS.items() if not s.edge_layouts])
def test_runs_name_every_frame_omni_ernie(name: str) -> None:
    """Ernie (temporal merge) and the Omni thinkers (a video with its audio: frames cut into pieces)."""
    require("transformers")
    setup = FAMILY_SETUPS[name]
    family = mrope.from_config(transformers_config(setup))
    parts = [[5, 6], Image(2, 3), [7], Video(4, 3, 2, audio=900 if setup.omni else None), [8, 9]]
    seconds = [1.3] if family.uses_second_per_grid_ts else None
    prompt = build_prompt(family, parts, seconds, use_audio_in_video=setup.omni)
    check_runs(family, prompt)
    if setup.omni:  # the audio's tokens are named as audio 1
        ids = np.asarray(prompt.input_ids)
        table, _ = family.segments(prompt.input_ids, **prompt.kwargs())
        runs = prompt_runs(family, ids, table, prompt.image_grid_thw, prompt.video_grid_thw, None)
        audio = runs.kind == "audio"
        assert audio.any() and (runs.item[audio] == 1).all()


@pytest.mark.parametrize("name", list(FAMILY_SETUPS))
def test_cli_layout_matches_the_suite(name: str) -> None:
    """The command's prompt parts give the ids and grids of the suite's prompt builder (the layout that
    the peer tests use)."""
    require("transformers")
    setup = FAMILY_SETUPS[name]
    family = mrope.from_config(transformers_config(setup))
    text_id = cli_prompt(family, [{"text": 1}]).input_ids[0]
    frames, temporal = 4, family.settings.get("temporal_merge_size", 1)
    video = {"video": [frames, 6, 4], "timestamp_tokens": 2}
    seconds = None
    if family.uses_second_per_grid_ts:
        video["second_per_grid_ts"], seconds = 0.5, [0.5]
    if setup.omni:
        video["audio"] = 700
    parts = [{"text": [5, 6]}, {"image": [1, 4, 6]}, {"text": 1}, video, {"text": [7]}]
    if setup.omni:
        parts.insert(1, {"audio": 300})
    ours = cli_prompt(family, parts, use_audio_in_video=setup.omni)
    stamps = ((text_id, text_id),) * frames
    suite_parts = [
        [5, 6],
        Image(2, 3),
        [text_id],
        Video(frames, 3, 2, stamps, 700 if setup.omni else None),
        [7],
    ]
    if setup.omni:
        from strategies import Audio

        suite_parts.insert(1, Audio(300))
    suite = build_prompt(family, suite_parts, seconds, use_audio_in_video=setup.omni)
    assert temporal == 1 or frames % temporal == 0
    assert ours.input_ids == suite.input_ids
    given = {k: v for k, v in ours.inputs.items() if v is not None}
    assert given == {k: v for k, v in suite.kwargs().items() if v is not None}


def write(tmp_path: Path, spec: object, name: str = "prompt.json") -> Path:
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return path


def test_command_writes_the_picture(tmp_path: Path, capsys, matplotlib_image) -> None:
    spec = {
        **QWEN2_5_VL,
        "compat": "transformers",
        "prompt": [{"text": 3}, {"video": [6, 4, 4]}, {"text": 4}],
    }
    out = tmp_path / "picture.png"
    assert main(["show", str(write(tmp_path, spec)), "--out", str(out), "--compare"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    check_picture(out, matplotlib_image)


def test_prompt_file_forms(tmp_path: Path) -> None:
    """input_ids with grids, and a config file next to the prompt with settings as overrides."""
    parts = load_prompt(write(tmp_path, {**QWEN2_5_VL, "prompt": [{"text": 2}, {"image": [1, 4, 4]}]}))
    explicit = {**QWEN2_5_VL, "input_ids": parts.input_ids, "image_grid_thw": [[1, 4, 4]]}
    same = load_prompt(write(tmp_path, explicit, "explicit.json"))
    assert (same.input_ids, same.inputs) == (parts.input_ids, {"image_grid_thw": [[1, 4, 4]]})
    write(
        tmp_path,
        {"model_type": "qwen2_5_vl", **QWEN2_5_VL["settings"], "tokens_per_second": 4},
        "config.json",
    )
    from_file = load_prompt(
        write(
            tmp_path,
            {"config": "config.json", "settings": {"tokens_per_second": 2}, "input_ids": [1]},
            "c.json",
        )
    )
    assert from_file.family.settings["tokens_per_second"] == 2
    assert from_file.family.settings["image_token_id"] == 151655


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ({"model_type": "llava", "input_ids": [1]}, "unsupported model_type 'llava'"),
        ({"input_ids": [1]}, "name the model with 'config' or 'model_type'"),
        ({**QWEN2_5_VL, "input_ids": [1], "colour": 1}, "unknown keys ['colour']"),
        ({**QWEN2_5_VL, "prompt": [{"text": 1}], "input_ids": [1]}, "give either 'prompt'"),
        ({**QWEN2_5_VL, "prompt": [{"picture": 1}]}, "prompt[0]: a part is an object"),
        ({**QWEN2_5_VL, "prompt": [{"image": [1, 3, 4]}]}, "multiples of spatial_merge_size 2"),
        ({**QWEN2_5_VL, "prompt": [{"audio": 30}]}, "qwen2_5_vl takes no audio"),
        ({**QWEN2_5_VL, "prompt": [{"text": -1}]}, "prompt[0] text must be an integer >= 0"),
        ({"model_type": "qwen2_vl", "prompt": []}, "needs the setting"),
        ({**QWEN2_5_VL, "compat": "sglang", "input_ids": [1]}, "compat"),
    ],
)
def test_bad_prompt_files(tmp_path: Path, spec: object, message: str, capsys) -> None:
    path = write(tmp_path, spec)
    with pytest.raises(mrope.MRopeError, match=rf"{message}".replace("[", r"\[").replace("(", r"\(")):
        load_prompt(path)
    assert main(["show", str(path), "--out", str(tmp_path / "x.png")]) == 2
    assert message.split("'")[0] in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_missing_prompt_file(tmp_path: Path) -> None:
    with pytest.raises(mrope.MRopeError, match="cannot read the prompt file"):
        load_prompt(tmp_path / "absent.json")


def test_show_refuses_bad_arguments(tmp_path: Path) -> None:
    prompt = load_prompt(EXAMPLES / "qwen2_vl.json")
    family, ids, inputs = prompt.family, prompt.input_ids, prompt.inputs
    with pytest.raises(mrope.MRopeError, match="must end in .png"):
        show(family, ids, **inputs, path=tmp_path / "x.svg")
    with pytest.raises(mrope.MRopeError, match="does not exist"):
        show(family, ids, **inputs, path=tmp_path / "absent" / "x.png")
    with pytest.raises(mrope.MRopeError, match="compat must be one of"):
        show(family, ids, **inputs, path=tmp_path / "x.png", compat="sglang")
    with pytest.raises(mrope.MRopeError, match="family must be a mrope Family"):
        show("qwen2_vl", ids, **inputs, path=tmp_path / "x.png")
    pytest.importorskip("matplotlib")
    with pytest.raises(mrope.MRopeError, match="image"):  # the grids do not match the placeholders
        show(family, ids, image_grid_thw=[[1, 4, 4]], path=tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


def test_without_matplotlib(tmp_path: Path, monkeypatch) -> None:
    prompt = load_prompt(EXAMPLES / "qwen2_vl.json")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import matplotlib.figure fails
    with pytest.raises(mrope.MRopeError, match=r"pip install 'mrope\[show\]'"):
        show(prompt.family, prompt.input_ids, **prompt.inputs, path=tmp_path / "x.png")
