"""Checks of a built mrope distribution, run by ``make dist`` in the environments it installs the wheel
into (the standard library and what the wheel installs only).

Usage::

    python scripts/check_dist.py numpy-only     # in a fresh venv holding only the wheel and numpy
    python scripts/check_dist.py vllm-plugin    # in vLLM's environment, the wheel first on PYTHONPATH

``numpy-only``: mrope imports from the installed wheel, not from a source tree; the environment holds
mrope, numpy and pip alone (no torch, no numba); one Qwen2-VL prompt's positions are computed and
checked against the values the rule gives. ``vllm-plugin``: vLLM's own plugin loader finds the wheel's
``vllm.general_plugins`` entry point ``mrope`` and loads it from the wheel (it acts only where
``MROPE_VLLM`` is set, so loading it changes nothing).
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path


def check_numpy_only() -> None:
    import numpy as np

    import mrope

    where = Path(mrope.__file__).resolve()
    if "site-packages" not in where.parts:
        sys.exit(f"mrope imported from {where}, not from the installed wheel")
    installed = sorted(d.metadata["Name"].lower() for d in metadata.distributions())
    extra = set(installed) - {"mrope", "numpy", "pip", "setuptools"}
    if extra:
        sys.exit(f"the numpy-only environment holds more than mrope and numpy: {sorted(extra)}")
    family = mrope.from_config(
        {
            "model_type": "qwen2_vl",
            "image_token_id": 9,
            "video_token_id": 8,
            "vision_config": {"spatial_merge_size": 2},
        }
    )
    # 2 text tokens, an image of grid (1, 4, 4) (merge 2: 2 x 2 placeholders), 1 text token
    ids = [1, 2, 9, 9, 9, 9, 3]
    positions, delta = family.positions(ids, image_grid_thw=[[1, 4, 4]])
    expected = np.array([[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]])
    if not np.array_equal(positions, expected) or delta != -2:
        sys.exit(f"positions {positions.tolist()} (delta {delta}), expected {expected.tolist()} (delta -2)")
    print(f"numpy-only: mrope {mrope.__version__} from {where.parent}, numpy {np.__version__}: positions ok")


def check_vllm_plugin() -> None:
    from vllm.plugins import load_plugins_by_group

    dist = next(d for d in metadata.distributions() if d.metadata["Name"] == "mrope")  # first on sys.path
    points = [e for e in dist.entry_points if e.group == "vllm.general_plugins"]
    if [e.value for e in points] != ["mrope.integrations.vllm:register"]:
        sys.exit(f"the wheel's vllm.general_plugins entry points: {points}")
    plugins = load_plugins_by_group("vllm.general_plugins")
    register = plugins.get("mrope")
    if register is None:
        sys.exit(f"vLLM's plugin loader found no mrope plugin (found {sorted(plugins)})")
    import mrope

    origin = Path(mrope.__file__).resolve().parent
    if not str(dist.locate_file("mrope")).startswith(str(origin.parent)):
        sys.exit(f"the plugin's mrope is {origin}, not the wheel's ({dist.locate_file('mrope')})")
    print(f"vllm-plugin: vLLM loaded {register.__module__}.{register.__name__} from {origin}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("check", choices=["numpy-only", "vllm-plugin"])
    args = parser.parse_args()
    check_numpy_only() if args.check == "numpy-only" else check_vllm_plugin()


if __name__ == "__main__":
    main()
