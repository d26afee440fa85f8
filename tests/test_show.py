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
from mrope.cli import build_prompt as cli_prompt
from mrope.cli import load_prompt, main
from mrope.show import prompt_runs, show
from support.peers import FAMILY_SETUPS, require, setup_config
from support.strategies import EDGE_LAYOUTS, Image, Video, build_prompt, edge_layout

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


def test_a_family_of_four_rows_draws_a_strip_per_row(tmp_path: Path, matplotlib_image) -> None:
    """HunYuan-VL's rows (index, w, h, t): one strip each, the picture taller than three rows'."""
    family = mrope.from_config(setup_config(FAMILY_SETUPS["hunyuan_vl"]))
    assert family.segment_rows.names == ("index", "w", "h", "t")
    prompt = build_prompt(family, [[5, 6], Image(2, 3), [7]])
    one = show(family, prompt.input_ids, **prompt.kwargs(), path=tmp_path / "one.png", compare=True)
    three = mrope.from_config(setup_config(FAMILY_SETUPS["hunyuan_vl-3rows"]))
    other = show(three, prompt.input_ids, **prompt.kwargs(), path=tmp_path / "three.png", compare=True)
    taller, shorter = check_picture(one, matplotlib_image), check_picture(other, matplotlib_image)
    assert taller.shape[0] > shorter.shape[0]


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
    runs = prompt_runs(family, ids, table, prompt.image_grid_thw or None, prompt.video_grid_thw or None)
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
            # a frame's pieces hold its H' * W' tokens (H' * (W' + 1): a newline token ends each row)
            m = family.spatial_merge_size
            plane = grid[1] // m * (grid[2] // m + (family.prompt_layout.name == "newline"))
            sizes = np.bincount(runs.frame[own], weights=(runs.end - runs.start)[own])[1:]
            np.testing.assert_array_equal(sizes, plane, err_msg=f"{kind} {number} frame sizes")
        assert not ((runs.kind == kind) & (runs.item > len(grids))).any()


@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
@pytest.mark.parametrize("name", [n for n, s in FAMILY_SETUPS.items() if s.edge_layouts])
def test_runs_name_every_frame(name: str, layout: str) -> None:
    require("transformers")
    family = mrope.from_config(setup_config(FAMILY_SETUPS[name]))
    check_runs(family, edge_layout(family, layout))


@pytest.mark.parametrize(
    "name", [n for n, s in FAMILY_SETUPS.items() if not s.edge_layouts and s.segment_rows]
)
def test_runs_name_every_frame_omni_ernie(name: str) -> None:
    """Ernie (temporal merge) and the Omni thinkers (a video with its audio: frames cut into pieces)."""
    require("transformers")
    setup = FAMILY_SETUPS[name]
    family = mrope.from_config(setup_config(setup))
    parts = [[5, 6], Image(2, 3), [7], Video(4, 3, 2, audio=900 if setup.omni else None), [8, 9]]
    seconds = [1.3] if family.uses_second_per_grid_ts else None
    prompt = build_prompt(family, parts, seconds, use_audio_in_video=setup.omni)
    check_runs(family, prompt)
    if setup.omni:  # the audio's tokens are named as audio 1
        ids = np.asarray(prompt.input_ids)
        table, _ = family.segments(prompt.input_ids, **prompt.kwargs())
        runs = prompt_runs(family, ids, table, prompt.image_grid_thw, prompt.video_grid_thw)
        audio = runs.kind == "audio"
        assert audio.any() and (runs.item[audio] == 1).all()


@pytest.mark.parametrize("name", [n for n, s in FAMILY_SETUPS.items() if s.segment_rows])
def test_cli_layout_matches_the_suite(name: str) -> None:
    """The command's prompt parts give the ids and grids of the suite's prompt builder (the layout that
    the peer tests use)."""
    require("transformers")
    setup = FAMILY_SETUPS[name]
    family = mrope.from_config(setup_config(setup))
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
        from support.strategies import Audio

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


# -- bounds: the prompt's size from its parts, the output path -----------------------------------------
def model_of(example: str) -> dict:
    """The model part of a docs example (model_type and settings)."""
    spec = json.loads((EXAMPLES / f"{example}.json").read_text())
    return {k: v for k, v in spec.items() if k in ("config", "model_type", "settings")}


#: prompts of a few bytes that ask for far more than mrope show draws, per layout: (example, parts,
#: use_audio_in_video, the part that passes the bound)
HUGE_PROMPTS = {
    "text": ("qwen2_5_vl", [{"text": 10**9}], False, "prompt[0]"),
    "image": ("qwen2_5_vl", [{"text": 2}, {"image": [1, 2**16, 2**16]}], False, "prompt[1]"),
    "frames": ("qwen3_vl", [{"video": [10**9, 2, 2]}], False, "prompt[0]"),  # a Python step per frame
    "timestamps": ("qwen3_vl", [{"video": [4, 2, 2], "timestamp_tokens": 10**9}], False, "prompt[0]"),
    "glm": ("glm4v", [{"text": 1}, {"video": [10**9, 2, 2]}], False, "prompt[1]"),
    "ernie": ("ernie4_5_vl", [{"video": [2 * 10**9, 4, 4]}], False, "prompt[0]"),
    "audio": ("qwen2_5_omni", [{"audio": 10**30}], False, "prompt[0]"),  # past int64
    "audio in video": ("qwen3_omni", [{"video": [2, 4, 4], "audio": 10**12}], True, "prompt[0]"),
    "many parts": ("qwen2_5_vl", [{"text": 2**19}, {"text": 2**19}, {"text": 1}], False, "prompt[2]"),
}


def test_huge_prompts_are_refused_from_their_parts(tmp_path: Path) -> None:
    """A prompt file of a few bytes asking for a billion tokens is refused before any token is laid out:
    in a child process limited to 1 GiB of address space, each file is refused within a second with a
    message naming the part, and the command exits with status 2 (no MemoryError)."""
    pytest.importorskip("resource")  # POSIX: the child limits its address space
    import subprocess

    files = {}
    for name, (example, parts, audio, _) in HUGE_PROMPTS.items():
        spec = {**model_of(example), "prompt": parts, **({"use_audio_in_video": True} if audio else {})}
        files[name] = write(tmp_path, spec, f"{name.replace(' ', '_')}.json")
        assert files[name].stat().st_size < 400
    child = f"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({1 << 30}, {1 << 30}))
from mrope.cli import load_prompt, main
for path in sys.argv[1:]:
    start = time.perf_counter()
    try:
        load_prompt(path)
        result = "loaded"
    except Exception as error:
        result = f"{{type(error).__name__}}: {{error}}"
    status = main(["show", path, "--out", path + ".png"])
    print(json.dumps([result, time.perf_counter() - start, status]), flush=True)
"""
    src = Path(mrope.__file__).resolve().parents[1]
    env = {"PYTHONPATH": str(src), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", child, *map(str, files.values())],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == len(files), done.stderr[-2000:]
    for (name, (_, _, _, part)), line in zip(HUGE_PROMPTS.items(), lines, strict=True):
        result, seconds, status = json.loads(line)
        assert result.startswith(f"MRopeError: {part}: the prompt reaches "), (name, result)
        assert result.endswith("prompts are laid out up to 1,048,576 tokens"), (name, result)
        assert seconds < 1.0 and status == 2, (name, seconds, status)
    assert "Traceback" not in done.stderr and done.stderr.count("mrope show: error: ") == len(files)
    assert not list(tmp_path.glob("*.png"))


def test_huge_video_times_draw_in_memory_bounded_by_tokens(tmp_path: Path, matplotlib_image) -> None:
    """A prompt of 16 tokens whose video's time reaches 1.9e9 (a large second_per_grid_ts) draws in a
    child process limited to 2 GiB of address space: nothing is sized by the largest position (an arange
    of it took 14 GiB)."""
    pytest.importorskip("resource")
    import subprocess

    spec = {
        **QWEN2_5_VL,
        "settings": {**QWEN2_5_VL["settings"], "tokens_per_second": 2},
        "prompt": [{"text": 3}, {"video": [2, 2, 4], "second_per_grid_ts": 1.75 * 2**29}, {"text": 4}],
    }
    path, out = write(tmp_path, spec), tmp_path / "huge.png"
    child = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({2 << 30}, {2 << 30}))
from mrope.cli import main
sys.exit(main(["show", sys.argv[1], "--out", sys.argv[2], "--compare"]))
"""
    src = Path(mrope.__file__).resolve().parents[1]
    env = {
        "PYTHONPATH": str(src),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "PATH": "",
        "MPLBACKEND": "Agg",
    }
    done = subprocess.run(
        [sys.executable, "-c", child, str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    check_picture(out, matplotlib_image)


def test_the_bound_is_exact(tmp_path: Path) -> None:
    """A prompt of MAX_TOKENS tokens is laid out, one more token is refused (the size counted from the
    parts is the length of the ids laid out); show() refuses longer ids before computing positions."""
    from mrope.show import MAX_TOKENS

    image = 1 * 4 * 4 // 4 + 2  # an image of grid (1, 4, 4): its pads and two markers
    parts = [{"text": 3}, {"image": [1, 4, 4]}, {"text": MAX_TOKENS - 3 - image}]
    prompt = load_prompt(write(tmp_path, {**QWEN2_5_VL, "prompt": parts}))
    assert len(prompt.input_ids) == MAX_TOKENS
    parts[-1]["text"] += 1
    with pytest.raises(
        mrope.MRopeError, match=r"^prompt\[2\]: the prompt reaches 1,048,577 tokens with this"
    ):
        load_prompt(write(tmp_path, {**QWEN2_5_VL, "prompt": parts}))
    ids = np.zeros(MAX_TOKENS + 1, dtype=np.int64)
    with pytest.raises(mrope.MRopeError, match=r"^the prompt has 1,048,577 tokens: mrope.show draws prompts"):
        show(prompt.family, ids, path=tmp_path / "x.png")
    with pytest.raises(mrope.MRopeError, match=r"'input_ids' has 1,048,577 tokens"):
        load_prompt(write(tmp_path, {**QWEN2_5_VL, "input_ids": ids.tolist()}, "ids.json"))
    assert not list(tmp_path.glob("*.png"))


def test_a_prompt_file_too_large_is_not_read(tmp_path: Path, monkeypatch) -> None:
    import mrope.cli

    path = write(tmp_path, {**QWEN2_5_VL, "prompt": [{"text": 5}]})
    monkeypatch.setattr(mrope.cli, "MAX_FILE_BYTES", 50)
    with pytest.raises(
        mrope.MRopeError, match=r"the prompt file has \d+ bytes: more than the 50 of a prompt"
    ):
        load_prompt(path)


@pytest.mark.parametrize("where", ["a folder", "a missing folder", "a file as folder", "a name too long"])
def test_unwritable_output_paths(tmp_path: Path, capsys, where: str) -> None:
    """The command prints the error and exits with status 2 before drawing anything; nothing is written."""
    prompt = write(tmp_path, {**QWEN2_5_VL, "prompt": [{"text": 3}, {"image": [1, 4, 4]}]})
    out = {
        "a folder": tmp_path / "folder.png",
        "a missing folder": tmp_path / "absent" / "x.png",
        "a file as folder": prompt / "x.png",
        "a name too long": tmp_path / ("a" * 300 + ".png"),
    }[where]
    if where == "a folder":
        out.mkdir()
    before = sorted(tmp_path.rglob("*"))
    assert main(["show", str(prompt), "--out", str(out)]) == 2
    message = {
        "a folder": "is a folder",
        "a missing folder": "does not exist",
        "a file as folder": "does not exist",
        "a name too long": "cannot write the picture to",
    }[where]
    err = capsys.readouterr().err
    assert err.startswith("mrope show: error: ") and message in err and "Traceback" not in err
    assert sorted(tmp_path.rglob("*")) == before


def test_a_failed_write_is_the_command_error(tmp_path: Path, capsys, monkeypatch) -> None:
    """A write that fails (a full disk, no permission) is reported like any other problem."""
    pytest.importorskip("matplotlib")
    import errno

    def no_space(self: Path, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_bytes", no_space)
    prompt = write(tmp_path, {**QWEN2_5_VL, "prompt": [{"text": 3}, {"image": [1, 4, 4]}]})
    assert main(["show", str(prompt), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the picture to {str(tmp_path / 'x.png')!r}: No space left on device" in err
    assert not (tmp_path / "x.png").exists()
