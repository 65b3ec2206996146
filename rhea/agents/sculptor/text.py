"""Text helpers for the context store: splitting a span into pieces, finding matches."""
from __future__ import annotations

import re

from rhea.errors import RheaConfigError


def split_span(text: str, start: int, end: int, n: int) -> list[tuple[int, int]]:
    """Split `text[start:end]` into `n` contiguous, non-empty pieces of about equal length.

    Each cut moves to the nearest line break (else space) within half a piece of its even
    position, so fragments tend to end at natural boundaries; the pieces always cover the
    span exactly.

    >>> split_span("aaaa\\nbbbb\\ncccc", 0, 14, 3)
    [(0, 5), (5, 10), (10, 14)]
    """
    length = end - start
    if n < 1:
        raise RheaConfigError(f"n={n} must be >= 1")
    if length < n:
        raise RheaConfigError(f"span of {length} chars cannot be split into {n} non-empty pieces; use fewer pieces")
    window = max(length // (2 * n), 0)
    cuts = [start]
    for k in range(1, n):
        target = start + round(k * length / n)
        cut = _natural_cut(text, target, window, low=cuts[-1] + 1, high=end - (n - k))
        cuts.append(cut)
    cuts.append(end)
    return list(zip(cuts[:-1], cuts[1:]))


def _natural_cut(text: str, target: int, window: int, low: int, high: int) -> int:
    # Cut just after a newline (else a space) closest to the even position; the bounds keep
    # every piece non-empty.
    lo, hi = max(low, target - window), min(high, target + window)
    for sep in ("\n", " "):
        best = None
        for pos in range(lo, hi + 1):
            if text[pos - 1] == sep and (best is None or abs(pos - target) < abs(best - target)):
                best = pos
        if best is not None:
            return best
    return min(max(target, low), high)


def find_all(haystack: str, needle: str) -> list[int]:
    """Start offsets of every case-insensitive, non-overlapping occurrence of `needle`.

    >>> find_all("Key=1; key=2; KEY=3", "key")
    [0, 7, 14]
    """
    # re.IGNORECASE matches on the original string, so offsets stay exact even where
    # lower() would change a string's length.
    if not needle:
        return []
    return [m.start() for m in re.finditer(re.escape(needle), haystack, re.IGNORECASE)]


def window(text: str, start: int, end: int, radius: int) -> str:
    """`text[start:end]` with `radius` chars either side, ellipses where it was cut.

    >>> window("0123456789", 4, 6, 2)
    '…234567…'
    """
    lo, hi = max(0, start - radius), min(len(text), end + radius)
    return ("…" if lo > 0 else "") + text[lo:hi] + ("…" if hi < len(text) else "")
