"""MiniCPM-V 4.7's prompts as its processor lays them out (hypothesis strategies), for the tests against
transformers (tests/families/test_minicpmv4_7.py) and vLLM (tests/integrations/vllm/)."""

from __future__ import annotations

from typing import Any, NamedTuple

from hypothesis import strategies as st

IMAGE, VIDEO, IMAGE_START, IMAGE_END, SLICE_START, SLICE_END, NEWLINE = range(90001, 90008)
ID_START, ID_END = 90010, 90011  # the processor's <image_id>N</image_id> (text to the rule)
IDS = {
    "image_token_id": IMAGE,
    "video_token_id": VIDEO,
    "image_start_id": IMAGE_START,
    "image_end_id": IMAGE_END,
    "slice_start_id": SLICE_START,
    "slice_end_id": SLICE_END,
    "newline_id": NEWLINE,
}
TEXT = st.one_of(st.integers(1000, 9000), st.just(NEWLINE))
MERGES = {"16x": 4, "4x": 2}


def config(**fields: Any) -> Any:
    """transformers' MiniCPM-V 4.7 config with the token ids above (``fields``: others)."""
    from transformers import AutoConfig

    return AutoConfig.for_model("minicpmv4_7", **IDS, **fields)


class Item(NamedTuple):
    """An image or video of a prompt: where its tokens start and its crops' (H, W), in order."""

    modality: str
    offset: int
    sizes: list[list[int]]


@st.composite
def sizes(draw: st.DrawFn, merge: int, most: int = 5, remainders: bool = True) -> list[int]:
    """A crop's (H, W) patch grid: merged sides 1..most; with ``remainders``, now and then with patches
    the merge drops (transformers' rule floors them; the processor's sizes are multiples of the merge)."""
    extra = st.integers(0, merge - 1) if remainders and draw(st.integers(0, 3)) == 0 else st.just(0)
    return [
        draw(st.integers(1, most)) * merge + draw(extra),
        draw(st.integers(1, most)) * merge + draw(extra),
    ]


def crop(token: int, size: list[int], merge: int) -> list[int]:
    return [token] * ((size[0] // merge) * (size[1] // merge))


@st.composite
def frame(
    draw: st.DrawFn, token: int, merge: int, video: bool, remainders: bool = True
) -> tuple[list[int], list[list[int]]]:
    """One picture or video frame as the processor writes it: ``<image>`` thumbnail ``</image>``, then (or
    not) rows of ``<slice>`` crop ``</slice>`` joined by newlines; its crops' sizes, thumbnail first.
    Slices of an image may differ in size; a ragged tiling (rows of different lengths) is not the
    processor's but is transformers' rule too."""
    thumb = draw(sizes(merge, remainders=remainders))
    ids = [IMAGE_START, *crop(token, thumb, merge), IMAGE_END]
    found = [thumb]
    if draw(st.booleans()):
        rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        lengths = [cols] * rows
        if draw(st.integers(0, 5)) == 0:
            lengths = draw(st.lists(st.integers(1, 3), min_size=rows, max_size=rows))
        shared = draw(sizes(merge, 4, remainders))
        lines = []
        for length in lengths:
            line = []
            for _ in range(length):
                size = shared if video or draw(st.booleans()) else draw(sizes(merge, 4, remainders))
                line += [SLICE_START, *crop(token, size, merge), SLICE_END]
                found.append(size)
            lines.append(line)
        for i, line in enumerate(lines):
            ids += ([NEWLINE] if i else []) + line
    return ids, found


@st.composite
def prompts(
    draw: st.DrawFn, merge: int = 4, max_items: int = 3, remainders: bool = True
) -> tuple[list[int], dict[str, Any]]:
    """A prompt in the processor's layout and its inputs: ``target_sizes`` and ``target_sizes_videos``,
    and ``items`` (:class:`Item`, an engine's view); text, images (after an ``<image_id>`` text or not)
    and videos (frames back to back), text between them that may be empty or newlines only (items then
    share a group). ``remainders``: see :func:`sizes`."""
    ids: list[int] = draw(st.lists(TEXT, max_size=4))
    images: list[list[int]] = []
    videos: list[list[int]] = []
    items = []
    for n in range(draw(st.integers(0, max_items))):
        if draw(st.booleans()):
            if draw(st.booleans()):
                ids += [ID_START, 2000 + n, ID_END]
            more, found = draw(frame(IMAGE, merge, False, remainders))
            items.append(Item("image", len(ids), found))
            ids += more
            images += found
        else:
            item = Item("video", len(ids), [])
            for _ in range(draw(st.integers(1, 4))):
                more, found = draw(frame(VIDEO, merge, True, remainders))
                ids += more
                item.sizes.extend(found)
            items.append(item)
            videos += item.sizes
        ids += draw(st.lists(TEXT, max_size=4))
    if not ids:
        ids = [1000]
    return ids, {"target_sizes": images or None, "target_sizes_videos": videos or None, "items": items}
