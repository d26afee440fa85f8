"""What mrope reports: its one error class, and a warning said once per process. Defined before any
submodule so that all of them can raise and note."""

from __future__ import annotations

import logging
import os


class MRopeError(ValueError):
    """Bad input to an mrope function: the message names the argument, the item and what is wrong."""


#: mrope's logger (the integrations log to its children, ``mrope.integrations.*``)
logger = logging.getLogger("mrope")
#: the (process, key) of the notes :func:`note_once` has logged
_noted: set[tuple[int, str]] = set()


def note_once(
    key: str, message: str, *args: object, log: logging.Logger = logger, level: int = logging.WARNING
) -> None:
    """Log ``message % args`` at ``level`` (a warning by default) the first time ``key`` is noted in this
    process: a fallback that every later call takes too (a compiled path not compiled, numba's cache not
    kept) is said once, not per call; a forked child says it again (another process). Kept in a module
    that always imports, so that a module whose import fails and is tried again does not say it again."""
    marker = (os.getpid(), key)
    if marker not in _noted:
        _noted.add(marker)
        log.log(level, message, *args)
