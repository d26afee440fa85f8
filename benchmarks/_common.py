"""What the benchmark scripts share besides timing: the test suite's peer calls and the command line.

The peer calls (transformers', SGLang's ``get_rope_index`` on mrope's inputs) live in the tests' support
package (``tests/support``) so that the tests and the benchmarks compare against the same code; the
environments ``make`` builds hold ``tests`` on their import path (see the Makefile).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from support import peers

ROOT = Path(__file__).resolve().parents[1]
#: Qwen2.5-VL-3B-Instruct's config (the fields the position rule reads)
QWEN2_5_VL_3B = {
    "model_type": "qwen2_5_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
}

__all__ = ["QWEN2_5_VL_3B", "ROOT", "main", "peers"]


def main(
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    """Parse a benchmark's arguments (``--json``, ``--quick`` and its own) and run it: its exit status."""
    parser = argparse.ArgumentParser(
        description=(doc or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", default=None, help="also write the raw results to this JSON file")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes (smoke test)")
    add_arguments(parser)
    return int(run(parser.parse_args(argv)) or 0)
