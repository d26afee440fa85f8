"""Rendering: positions from a table of segments (:mod:`mrope.core.segments`: the fields and the formula).

One backend per array library, each with the same primitives over the one formula and the one
numbering of the segment rows: the segment of each index, the positions of tokens at their segments (a
run of one segment, for numba), the decode tail (``index + delta``).

======================  =========================  ==========================  ======================
backend                 segment lookup             render                      decode tail
======================  =========================  ==========================  ======================
:mod:`.numpy`           ``find_segments``          ``render_at``               ``render_tail``
:mod:`.numba`           ``find_segment``           ``render_run``              ``render_tail``
:mod:`.torch`           ``find_segments``          ``render_at``               ``render_tail``
:mod:`.triton`          ``find_segment``           ``render_at``               (the pool's tail segment)
======================  =========================  ==========================  ======================

:mod:`.choose` picks numba or numpy (``MROPE_NUMBA``); :mod:`.table` renders a whole table
(:func:`render_all`) or any indices (:func:`render`); :mod:`.recover` is the inverse (:func:`segments_of`).
The serving steps (:mod:`mrope.serving`) compose the primitives, once per backend. Importing this
package imports numpy only.
"""

from .recover import segments_of
from .table import render, render_all

__all__ = ["render", "render_all", "segments_of"]
