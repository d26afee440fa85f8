"""A picture of a prompt's positions: the t, h and w ids over token index, as one PNG.

:func:`show` draws three aligned strips (t, h, w) sharing the token axis, above a band that names every
run of the prompt: vision blocks (``image 1``, ``video 1 frame 3``), text runs and, for the Omni
families, audio. Each vision block is outlined in the three strips, and the title gives the delta (the
offset of every token after the prompt). ``compare=True`` draws both conventions (``"vllm"`` and
``"transformers"``) over each other, shades the tokens where they differ and adds a strip of their
difference.

matplotlib is imported only when :func:`show` runs (``pip install 'mrope[show]'``); the blocks are read
from the public :meth:`mrope.Family.segments` table, so the picture shows what the library computes.
"""

from __future__ import annotations

import io
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import MRopeError
from .core import COMPATS, Compat
from .families import ArrayLike, Family, MultimodalInputs

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["MAX_TOKENS", "show"]

ROWS = ("t", "h", "w")  # the rows of every family but HunYuan-VL (its own: Family.segment_rows.names)
#: fill colors of the runs in the band: text, image, video, audio
KIND_COLORS = {"text": "#d9d9d9", "image": "#4c8bd6", "video": "#f0a030", "audio": "#55a868"}
LINE_COLORS = {"vllm": "#1f4e9a", "transformers": "#d1495b"}
DIFF_COLOR = "#ff6b6b"
MAX_OUTLINES = 4000  # more vision blocks than this: outline whole items only
#: the largest prompt drawn, in tokens (2**20): beyond the models' context windows, and far more tokens
#: than the picture's ~1500 pixels of width tell apart. Drawing that many takes about 2 s and 0.3 GB
#: (0.6 GB with ``compare=True``); at worst, a third of a million one-token frames, about 12 s and 1 GB
MAX_TOKENS = 1 << 20
FONT_SIZE = 8.0


@dataclass(frozen=True)
class Runs:
    """The prompt cut into runs, sorted by start (arrays of shape (num_runs,)): ``end`` is exclusive;
    ``kind`` a key of :data:`KIND_COLORS`; ``item`` the 1-based image, video or audio number (0: text);
    ``frame`` the 1-based frame of its item (0: not a frame)."""

    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    item: np.ndarray
    frame: np.ndarray
    frames_of_item: np.ndarray  # how many frames the run's item has (0: not a vision item)


def show(
    family: Family,
    input_ids: ArrayLike,
    inputs: MultimodalInputs | None = None,
    *,
    path: str | Path,
    compat: Compat | None = None,
    compare: bool = False,
    title: str | None = None,
    **keywords: Any,
) -> Path:
    """Draw one prompt's positions into a PNG file and return its path.

    Parameters
    ----------
    family : Family
        The model family ([`mrope.from_config`][mrope.from_config]).
    input_ids : list, numpy array or torch tensor, shape (L,), integer
    inputs : MultimodalInputs, optional
        The prompt's inputs ([`mrope.MultimodalInputs`][mrope.MultimodalInputs]), or its fields as
        keywords (``**keywords``), as [`Family.positions`][mrope.Family.positions] takes them.
    path : str or pathlib.Path
        Where to write the picture; it must end in ``.png`` and its folder must exist.
    compat : str, optional
        ``"vllm"`` or ``"transformers"``: the convention drawn; None (default): the family's own.
    compare : bool
        Draw both conventions over each other and highlight the tokens where they differ
        (``compat`` is then ignored).
    title : str, optional
        A first title line (default: the model type and the prompt's size).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    MRopeError
        matplotlib is not installed, ``family`` is not a family, ``path`` is not a ``.png`` in an
        existing folder (or is a folder, or cannot be written), ``compat`` is unknown, the prompt has
        more than ``mrope.show.MAX_TOKENS`` (2**20) tokens, or it is refused by
        [`Family.positions`][mrope.Family.positions].
    """
    if not isinstance(family, Family):
        raise MRopeError(f"family must be a mrope Family (mrope.from_config), got {type(family).__name__}")
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise MRopeError(f"path must end in .png, got {str(path)!r}")
    _check_writable(out, path)
    if compat is not None and compat not in COMPATS:
        raise MRopeError(f"compat must be one of {COMPATS}, got {compat!r}")
    length = _length(input_ids)
    if length > MAX_TOKENS:
        raise MRopeError(
            f"the prompt has {length:,} tokens: mrope.show draws prompts of at most {MAX_TOKENS:,} tokens"
        )
    figure_class = _figure_class()
    given = MultimodalInputs.gather(inputs, keywords).as_arrays()
    compats = COMPATS if compare else (compat or family.compat,)
    drawn = {c: family.with_compat(c).positions(input_ids, given) for c in compats}
    table, _ = family.segments(input_ids, given)
    checked = family.request_inputs(input_ids, given)  # the grids as the family reads them
    ids = np.asarray(input_ids).reshape(-1).astype(np.int64)
    runs = prompt_runs(family, ids, table, checked.images, checked.videos)
    figure = _draw(figure_class, family, ids.size, runs, drawn, title)
    picture = io.BytesIO()  # drawn in full before the file is opened: a failed drawing writes nothing
    figure.savefig(picture, format="png", dpi=110)
    try:
        out.write_bytes(picture.getbuffer())
    except OSError as error:
        raise MRopeError(f"cannot write the picture to {str(path)!r}: {error.strerror or error}") from None
    return out


def _check_writable(out: Path, path: str | Path) -> None:
    """Refuse an output path that cannot be written, before anything is drawn: a folder, a path in a
    missing folder, a name the system refuses (too long, a loop of links). A folder without write
    permission is found when the file is written."""
    try:
        mode: int | None = os.stat(out).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as error:
        raise MRopeError(f"cannot write the picture to {str(path)!r}: {error.strerror or error}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise MRopeError(f"path {str(path)!r} is a folder: give the PNG file to write")
    if not os.path.isdir(out.parent):
        raise MRopeError(f"the folder of path {str(path)!r} does not exist")


def _length(input_ids: ArrayLike) -> int:
    """The number of tokens of ``input_ids`` (a sequence, or an array of any shape), not converted."""
    shape = getattr(input_ids, "shape", None)
    if shape is not None:
        return math.prod(int(n) for n in shape)
    try:
        return len(input_ids)  # type: ignore[arg-type]
    except TypeError:
        return 0  # not a sequence: Family.positions refuses it


def _figure_class() -> Any:
    """matplotlib's ``Figure`` (no pyplot: no global state, no display needed)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MRopeError(
            "mrope.show draws with matplotlib, which is not installed: pip install 'mrope[show]'"
        ) from error
    return Figure


# -- the prompt's runs -------------------------------------------------------------------------------


def prompt_runs(
    family: Family,
    ids: np.ndarray,
    table: Any,
    image_grid_thw: ArrayLike | None,
    video_grid_thw: ArrayLike | None,
) -> Runs:
    """The runs of a prompt: each vision block of ``table`` (a frame, or a piece of one) named by its
    item and frame, and the text and audio runs between them."""
    length = ids.size
    starts = np.asarray(table.start, dtype=np.int64)
    ends = np.append(starts[1:], length)
    keep = ends > starts
    vision = keep & (np.asarray(table.is_text) == 0)
    v_start, v_end = starts[vision], ends[vision]
    origin = np.asarray(table.origin, dtype=np.int64)[vision]
    # a frame split into pieces (Omni: audio interleaved inside it) starts with the piece at offset 0
    # (start == origin); each later piece continues it
    frame_start = v_start == origin
    frame_of_piece = np.cumsum(frame_start) - 1
    is_video_frame = family.is_video_block(ids, v_start[frame_start])
    item, frame, frames_of_item = np.zeros((3, is_video_frame.size), dtype=np.int64)
    counts = {
        "image": _grid(image_grid_thw)[:, 0],
        "video": _grid(video_grid_thw)[:, 0] // family.video_temporal_merge,
    }
    for kind, selected in (("image", ~is_video_frame), ("video", is_video_frame)):
        per_item = counts[kind]
        found = int(selected.sum())
        if found != int(per_item.sum()):
            raise MRopeError(
                f"the prompt has {found} {kind} blocks where its grids give {int(per_item.sum())}"
            )
        first_frame = np.cumsum(per_item) - per_item  # of each item, among this kind's frames
        index = np.arange(found)
        owner = np.searchsorted(first_frame, index, side="right") - 1
        item[selected] = owner + 1
        frame[selected] = index - first_frame[owner] + 1
        frames_of_item[selected] = per_item[owner]

    # every token outside a vision block: text, or audio where it is an audio placeholder
    covered = np.zeros(length + 1, dtype=np.int64)
    np.add.at(covered, v_start, 1)
    np.add.at(covered, v_end, -1)
    other = np.cumsum(covered[:-1]) == 0
    audio_ids = family.audio_run_ids()
    audio = other & np.isin(ids, audio_ids) if audio_ids else np.zeros(length, dtype=bool)
    audio_start_id = family.audio_start_id()
    audio_number = np.cumsum(ids == audio_start_id) if audio_start_id is not None else np.zeros(length, int)
    label = np.where(other, np.where(audio, 1, 0), -1)  # 0 text, 1 audio, -1 vision
    change = np.flatnonzero(np.diff(label) != 0) + 1
    r_start = np.concatenate(([0], change)) if length else np.zeros(0, dtype=np.int64)
    r_end = np.append(r_start[1:], length)
    r_label = label[r_start]
    plain = r_label >= 0
    r_start, r_end, r_label = r_start[plain], r_end[plain], r_label[plain]

    start = np.concatenate([v_start, r_start])
    order = np.argsort(start, kind="stable")
    kind_names = np.array(["image", "video", "text", "audio"])
    kinds = np.concatenate([np.where(is_video_frame[frame_of_piece], 1, 0), 2 + r_label])
    items = np.concatenate([item[frame_of_piece], np.where(r_label == 1, audio_number[r_start], 0)])
    return Runs(
        start=start[order],
        end=np.concatenate([v_end, r_end])[order],
        kind=kind_names[kinds[order]],
        item=items[order],
        frame=np.concatenate([frame[frame_of_piece], np.zeros(r_start.size, dtype=np.int64)])[order],
        frames_of_item=np.concatenate(
            [frames_of_item[frame_of_piece], np.zeros(r_start.size, dtype=np.int64)]
        )[order],
    )


def _grid(grid_thw: ArrayLike | None) -> np.ndarray:
    if grid_thw is None:
        return np.zeros((0, 3), dtype=np.int64)
    return np.asarray(grid_thw, dtype=np.int64).reshape(-1, 3)


def run_labels(runs: Runs, selected: np.ndarray | None = None) -> list[tuple[str, ...]]:
    """The labels of the runs at ``selected`` (indices; default all), longest first (the drawing keeps
    the longest that fits)."""
    picked = np.arange(runs.start.size) if selected is None else selected
    labels = []
    for r in picked:
        kind, item, frame, size = runs.kind[r], runs.item[r], runs.frame[r], runs.end[r] - runs.start[r]
        if kind == "text":
            labels.append((f"text ({size})", "text"))
        elif kind == "audio":
            labels.append((f"audio {item}", f"a{item}", "a"))
        elif runs.frames_of_item[r] > 1:
            labels.append((f"{kind} {item} frame {frame}", f"frame {frame}", f"f{frame}"))
        else:
            labels.append((f"{kind} {item}", f"{kind[0]}{item}"))
    return labels


# -- the drawing -------------------------------------------------------------------------------------


def _draw(
    figure_class: Any,
    family: Family,
    length: int,
    runs: Runs,
    drawn: dict[str, tuple[np.ndarray, int | float]],
    title: str | None,
) -> Any:
    compare = len(drawn) > 1
    names = family.segment_rows.names  # one strip per row of the family's positions
    heights = [1.1] + [2.2] * len(names) + ([1.4] if compare else [])
    figure = figure_class(figsize=(14, sum(heights) + 1.2), layout="constrained")
    axes = figure.subplots(len(heights), 1, sharex=True, gridspec_kw={"height_ratios": heights})
    band, strips = axes[0], axes[1 : 1 + len(names)]
    tail = max(2, round(0.04 * max(length, 1)))  # decode tokens drawn after the prompt
    x_max = length + tail
    positions = {c: np.asarray(p, dtype=np.float64) for c, (p, _) in drawn.items()}
    first = positions[next(iter(drawn))]
    differs = np.zeros(length, dtype=bool)
    if compare:
        differs = np.any(positions["vllm"] != positions["transformers"], axis=0)

    _draw_band(band, runs, length, x_max, figure)
    index = np.arange(length)
    for r, (axis, row) in enumerate(zip(strips, names, strict=True)):
        _shade(axis, differs, DIFF_COLOR, 0.18)
        _outline(axis, runs, first[r])
        for compat_name, (_pos, delta) in drawn.items():
            style = "--" if compare and compat_name == "transformers" else "-"
            axis.plot(
                index,
                positions[compat_name][r],
                style,
                color=LINE_COLORS[compat_name],
                linewidth=0.9 if length > 300 else 1.3,
                marker="." if length <= 120 else None,
                markersize=3,
                label=f"compat={compat_name!r}",
            )
            if differs.any():  # the differing tokens, marked so that a few stand out
                axis.plot(
                    index[differs],
                    positions[compat_name][r][differs],
                    "o",
                    color=LINE_COLORS[compat_name],
                    markersize=3.5 if differs.sum() < 200 else 1.5,
                )
            decode = np.arange(length, x_max)
            axis.plot(decode, decode + delta, ":", color=LINE_COLORS[compat_name], linewidth=1.2)
        axis.axvline(length - 0.5, color="#555555", linewidth=0.8, linestyle=":")
        axis.set_ylabel(f"{row} id", rotation=0, ha="right", va="center", fontsize=10)
        axis.grid(axis="y", color="#eeeeee", linewidth=0.6)
        axis.margins(y=0.08)
    strips[0].text(
        length - 0.5,
        1.0,
        " decode: index i has position i + delta",
        transform=strips[0].get_xaxis_transform(),
        fontsize=FONT_SIZE,
        va="bottom",
        ha="right",
        color="#444444",
    )
    if compare:
        strips[0].legend(loc="upper left", fontsize=FONT_SIZE, framealpha=0.9)
        _draw_difference(axes[-1], positions, differs, names)
    axes[-1].set_xlabel("token index")
    axes[-1].set_xlim(-0.5, x_max - 0.5)
    figure.suptitle(_title(family, length, drawn, differs, title), fontsize=11)
    return figure


def _title(
    family: Family,
    length: int,
    drawn: dict[str, tuple[np.ndarray, int | float]],
    differs: np.ndarray,
    title: str | None,
) -> str:
    head = title or f"{family.model_type}: {length} tokens"
    if len(drawn) == 1:
        ((compat, (_, delta)),) = drawn.items()
        return f"{head}    compat={compat!r}    delta = {_number(delta)}"
    deltas = ", ".join(f"{c} {_number(d)}" for c, (_, d) in drawn.items())
    count = int(differs.sum())
    where = (
        f"positions differ at {count} tokens (shaded)" if count else "the conventions agree on every token"
    )
    return f"{head}    delta: {deltas}    {where}"


def _number(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _draw_band(axis: Axes, runs: Runs, length: int, x_max: int, figure: Any) -> None:
    """The run band: one colored box per run, labelled where the label fits; item names above."""
    from matplotlib.collections import PolyCollection

    colors = [KIND_COLORS[k] for k in runs.kind]
    axis.add_collection(
        PolyCollection(
            _boxes(runs.start - 0.5, runs.end - 0.5, np.zeros(runs.start.size), np.ones(runs.start.size)),
            facecolors=colors,
            edgecolors="white",
            linewidths=0.6,
        )
    )
    axis.set_ylim(0, 2)
    axis.set_yticks([])
    axis.set_ylabel("runs", rotation=0, ha="right", va="center", fontsize=10)
    for side in ("top", "right", "left"):
        axis.spines[side].set_visible(False)
    points_per_token = _axis_width_points(axis, figure) / max(x_max, 1)
    # only runs wide enough for a label of one character are labelled (a bounded number of them)
    wide = np.flatnonzero((runs.end - runs.start) * points_per_token >= _label_width("a"))
    for r, labels in zip(wide, run_labels(runs, wide), strict=True):
        _label(axis, runs.start[r], runs.end[r], 0.5, labels, points_per_token, "black")
    # the item names above multi-frame items and audio runs: one label per item
    vision = runs.frames_of_item > 1
    for kind in ("image", "video"):
        mask = vision & (runs.kind == kind)
        for item in np.unique(runs.item[mask]):
            own = mask & (runs.item == item)
            start, end = runs.start[own].min(), runs.end[own].max()
            frames = runs.frames_of_item[own][0]
            axis.plot([start - 0.5, end - 0.5], [1.2, 1.2], color=KIND_COLORS[kind], linewidth=2)
            labels = (f"{kind} {item} ({frames} frames)", f"{kind} {item}", f"{kind[0]}{item}")
            _label(axis, start, end, 1.55, labels, points_per_token, "black")


def _label(
    axis: Axes, start: int, end: int, y: float, labels: tuple[str, ...], points_per_token: float, color: str
) -> None:
    """The longest of ``labels`` that fits over tokens ``start .. end - 1``, centered; none if none fits."""
    room = (end - start) * points_per_token
    for text in labels:
        if _label_width(text) <= room:
            axis.text(
                (start + end - 1) / 2, y, text, ha="center", va="center", fontsize=FONT_SIZE, color=color
            )
            return


def _label_width(text: str) -> float:
    """A label's width in points, with a little room on each side (DejaVu Sans, an estimate)."""
    return len(text) * FONT_SIZE * 0.62 + 4


def _axis_width_points(axis: Axes, figure: Any) -> float:
    """The axes' width in points (before layout: the figure width less the usual margins)."""
    return figure.get_figwidth() * 72 * 0.86


def _boxes(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> np.ndarray:
    """Rectangles as (n, 4, 2) vertices, for one PolyCollection."""
    return np.stack(
        [np.stack([x0, y0], -1), np.stack([x1, y0], -1), np.stack([x1, y1], -1), np.stack([x0, y1], -1)], 1
    )


def _outline(axis: Axes, runs: Runs, row: np.ndarray) -> None:
    """Outline every vision block (or whole item, when there are very many) over its positions on ``row``."""
    from matplotlib.collections import PolyCollection

    vision = (runs.kind == "image") | (runs.kind == "video")
    start, end, kind = runs.start[vision], runs.end[vision], runs.kind[vision]
    if start.size == 0:
        return
    if start.size > MAX_OUTLINES:  # one box per item
        key = np.where(kind == "video", 1, 0) * (runs.item.max() + 1) + runs.item[vision]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        item_end = np.zeros(first.size, dtype=np.int64)
        np.maximum.at(item_end, inverse, end)
        start, end, kind = start[first], item_end, kind[first]
        order = np.argsort(start)
        start, end, kind = start[order], end[order], kind[order]
    # min and max of the row over each box: reduceat over (start, end) pairs, every other result
    padded = np.append(row, row[-1])
    bounds = np.stack([start, end], 1).ravel()
    low = np.minimum.reduceat(padded, bounds)[::2]
    high = np.maximum.reduceat(padded, bounds)[::2]
    pad = max(0.4, 0.01 * float(np.ptp(row)) if row.size else 0.4)
    axis.add_collection(
        PolyCollection(
            _boxes(start - 0.5, end - 0.5, low - pad, high + pad),
            facecolors="none",
            edgecolors=[KIND_COLORS[k] for k in kind],
            linewidths=1.1,
        )
    )


def _shade(axis: Axes, mask: np.ndarray, color: str, alpha: float) -> None:
    """Shade the runs of tokens where ``mask`` holds, full height (one collection)."""
    from matplotlib.collections import PolyCollection

    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if starts.size == 0:
        return
    full = np.ones(starts.size)
    axis.add_collection(
        PolyCollection(
            _boxes(starts - 0.5, ends - 0.5, 0 * full, full),
            transform=axis.get_xaxis_transform(),  # x in tokens, y from the bottom (0) to the top (1)
            facecolors=color,
            alpha=alpha,
            linewidths=0,
        ),
        autolim=False,
    )


def _draw_difference(
    axis: Axes, positions: dict[str, np.ndarray], differs: np.ndarray, names: tuple[str, ...]
) -> None:
    """transformers minus vllm on each row (``names``)."""
    _shade(axis, differs, DIFF_COLOR, 0.18)
    difference = positions["transformers"] - positions["vllm"]
    index = np.arange(difference.shape[1])
    styles = ("-", "--", ":", "-.")
    for r, row in enumerate(names):
        style = styles[r % len(styles)]
        axis.plot(index, difference[r], style, color="#333333", linewidth=1.0, label=row)
    axis.axhline(0, color="#999999", linewidth=0.6)
    axis.set_ylabel("transformers\n− vllm", rotation=0, ha="right", va="center", fontsize=9)
    axis.legend(loc="lower left", fontsize=FONT_SIZE, ncols=len(names), framealpha=0.9)
    axis.margins(y=0.2)
