"""Exceptions raised by ntp: one per status code the C++ core returns.

The message is the one line the ``ntp`` CLI prints after ``ntp COMMAND: error:`` for the same
input: it names the bad value and the fix.
"""


class Error(Exception):
    """Any failure reported by ntp's core."""


class InvalidArgumentError(Error, ValueError):
    """Bad input: the message names the value and how to fix it."""


class NotFoundError(Error, LookupError):
    """A file, tensor or key that is not there."""


class AlreadyExistsError(Error):
    """The target already exists (for example a complete checkpoint)."""


__all__ = ["Error", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError"]
