"""The environment variables that switch mrope's paths: their "on" and "off" values, read one way.

``MROPE_VLLM`` and ``MROPE_SGLANG`` (an integration's mode, :func:`env_mode`) and ``MROPE_NUMBA`` (the
compiled paths, :func:`mrope.render.choose.numba_allowed`) accept the same words.
"""

from __future__ import annotations

import os

#: the values of an environment variable that mean "off" (``MROPE_NUMBA``, ``MROPE_VLLM``)
OFF_VALUES = ("0", "false", "off", "no")
#: the values of an integration's environment variable (``MROPE_VLLM``, ``MROPE_SGLANG``) that mean "on"
ON_VALUES = ("1", "true", "on", "yes", "mrope")


def env_mode(name: str) -> str | None:
    """The mode an integration's environment variable asks for: None (unset or off), ``"mrope"`` (on), or
    the value as written (``"check"``; ``enable`` refuses anything else)."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("", *OFF_VALUES):
        return None
    return "mrope" if value in ON_VALUES else value
