"""Argument checks shared by policies, each naming the bad value and the fix."""
from __future__ import annotations

from rhea.errors import RheaConfigError


def positive_int(value, name: str, *, minimum: int = 1) -> int:
    """`value` if it is an int >= `minimum`, else ValueError.

    >>> positive_int(5, "k")
    5
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RheaConfigError(f"{name}={value!r} must be an int >= {minimum}")
    return value
