"""What mrope reports: its one error class, and a warning said once per process. Defined before any
submodule so that all of them can raise and note."""

from __future__ import annotations

import logging


class MRopeError(ValueError):
    """Bad input to an mrope function: the message names the argument, the item and what is wrong."""


#: mrope's logger (the integrations log to its children, ``mrope.integrations.*``)
logger = logging.getLogger("mrope")
#: the keys of the notes :func:`note_once` has logged in this process
_noted: set[str] = set()


def note_once(key: str, message: str) -> None:
    """Log ``message`` as a warning of the ``mrope`` logger the first time ``key`` is noted in this
    process: a fallback that every later call takes too (a compiled path not compiled, numba's cache
    not kept) is said once, not per call. Kept in a module that always imports, so that a module whose
    import fails and is tried again does not say it again."""
    if key not in _noted:
        _noted.add(key)
        logger.warning(message)
