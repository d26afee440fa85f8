"""Serving: the per-step M-RoPE positions of a serving engine's running requests.

:class:`PositionTable` keeps each running request's placed segments (O(images + frames)) and writes
the positions of every token scheduled in an engine step in one vectorized call: numpy on the host,
or torch ops on the device without host synchronization.
"""

from .packed import PackedPrompt
from .table import PositionTable

__all__ = ["PackedPrompt", "PositionTable"]
