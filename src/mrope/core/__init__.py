"""The vectorized core shared by every family and API: parse (per family), place, render.

A token stream (one prompt, or the real tokens of a padded batch laid end to end) is described by its
blocks, found by a family's parser: vision grid blocks (:class:`Blocks`), or items that the family lays
out itself (:class:`ItemBlocks`, the Omni thinkers). :func:`place` gives every block its base position
and says where text resumes after it (the conventions live there only); :func:`build_segments` turns
the placed blocks into a small table of segments (:mod:`.segments`: the fields and the render formula,
each written once) with the one :class:`SegmentBuilder`; :mod:`mrope.render` computes positions from
that table. :mod:`.one_row` is the fast path of one prompt with a few blocks.
"""

from typing import Literal

from .blocks import BlockRow, Blocks, locate_items
from .one_row import (
    FEW_BLOCKS,
    OneRowLayout,
    block_rows,
    blocks_from_rows,
    layout_one_row,
    render_one_row,
    segments_one_row,
)
from .place import COMPATS, ItemBlocks, Placed, build_segments, place
from .rows import PLAIN_ROWS, SegmentRows
from .segments import FIELDS, SegmentBuilder, SegmentTable, render_formula, render_offsets

#: a convention: where text resumes after a vision block (:data:`COMPATS` lists them; the README's
#: conventions). ``compat=None`` in every API means the family's own (see :func:`mrope.families.family_for`)
Compat = Literal["vllm", "transformers"]

__all__ = [
    "FEW_BLOCKS",
    "ItemBlocks",
    "BlockRow",
    "COMPATS",
    "Compat",
    "FIELDS",
    "Blocks",
    "Placed",
    "PLAIN_ROWS",
    "SegmentRows",
    "SegmentBuilder",
    "SegmentTable",
    "block_rows",
    "blocks_from_rows",
    "build_segments",
    "locate_items",
    "place",
    "render_formula",
    "render_offsets",
    "render_one_row",
    "segments_one_row",
    "layout_one_row",
    "OneRowLayout",
]
