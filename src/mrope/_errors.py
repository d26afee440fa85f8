"""The one error class of mrope, defined before any submodule so that all of them can raise it."""


class MRopeError(ValueError):
    """Bad input to an mrope function: the message names the argument, the item and what is wrong."""
