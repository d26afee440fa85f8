"""GLM-Image prompts for the tests: the processor's layout and ids (``tests/families/test_glm_image.py``
against transformers, ``tests/integrations/sglang/test_sglang_glm_image.py`` against SGLang)."""

from __future__ import annotations

from hypothesis import strategies as st

START, END, IMAGE = 16384, 16385, 167855  # GLM-Image's defaults (its config's and processor's ids)
TEXT = st.integers(0, 16383)  # ids that are not markers (the text vocabulary reaches far past them)


@st.composite
def glm_prompts(
    draw: st.DrawFn, max_sources: int = 3, max_side: int = 5, complete: bool = False
) -> tuple[list[int], list[list[int]]]:
    """A prompt as GLM-Image's processor lays it out, and its grids: text-to-image (no source image, the
    two target grids, each described in text) or image-to-image (source images ``image_start, H * W
    image tokens, image_end`` among the text, then one target grid), ending with the generation's
    ``image_start``; with ``complete``, also prompts without target grids (every grid complete)."""
    side = st.integers(1, max_side)
    sources = draw(st.integers(0, max_sources))
    ids: list[int] = []
    grids = []
    for _ in range(sources):
        ids += draw(st.lists(TEXT, max_size=4))
        h, w = draw(side), draw(side)
        ids += [START] + [IMAGE] * (h * w) + [END]
        grids.append([1, h, w])
    ids += draw(st.lists(TEXT, min_size=0 if sources else 1, max_size=6))  # the grids' text, the prompt's
    targets = 2 if sources == 0 else 1
    if complete:
        targets = draw(st.sampled_from([targets, 0]))
    grids += [[1, draw(side), draw(side)] for _ in range(targets)]
    return ids + [START], grids
