"""Regenerate the docs' pictures: ``mrope show`` on every prompt file of docs/examples.

Usage: ``python docs/make_pictures.py`` (from the repository root, with mrope and matplotlib installed).
``docs/examples/NAME.json`` gives ``docs/images/NAME.png``; the prompts listed in ``COMPARED`` are drawn
with ``--compare`` (both conventions) as ``docs/images/NAME-compare.png`` too.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mrope.cli import main

DOCS = Path(__file__).resolve().parent
COMPARED = ("conventions",)


def make_pictures() -> int:
    """Draw every example; returns the number of failures."""
    failures = 0
    for example in sorted((DOCS / "examples").glob("*.json")):
        runs = [[]] + ([["--compare"]] if example.stem in COMPARED else [])
        for extra in runs:
            suffix = "-compare" if extra else ""
            out = DOCS / "images" / f"{example.stem}{suffix}.png"
            failures += main(["show", str(example), "--out", str(out), *extra]) != 0
    return failures


if __name__ == "__main__":
    sys.exit(1 if make_pictures() else 0)
