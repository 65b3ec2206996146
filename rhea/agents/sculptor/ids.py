"""Short, unique, reproducible ids for fragments and searches.

The paper's examples are 6 characters with a kind letter first: 'f1a2b3' for a fragment,
'sla2b3' (read 's1a2b3') for a search result (appendix H); `AcmStore` issues ids the same way.
"""
from __future__ import annotations

import random

_HEX = "0123456789abcdef"


class IdGenerator:
    """Issues 6-character hex ids, deterministic for a seed and never repeated.

    Ids already issued (even for fragments later undone) are never issued again, so an id
    the model saw earlier can never silently point at different text.

    >>> gen = IdGenerator(seed=0)
    >>> a, b = gen.new(), gen.new()
    >>> len(a), a != b, IdGenerator(seed=0).new() == a
    (6, True, True)
    """

    LENGTH = 6

    def __init__(self, seed: int = 0):
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}: {seed!r}")
        self._rng = random.Random(seed)
        self._issued: set[str] = set()

    def new(self, prefix: str = "") -> str:
        """A fresh id: `prefix` (the paper's 'f' for fragments, 's' for search results) then hex.

        >>> IdGenerator(seed=0).new("f")[0], len(IdGenerator(seed=0).new("f"))
        ('f', 6)
        """
        if len(prefix) >= self.LENGTH:
            raise ValueError(f"prefix {prefix!r} leaves no room in a {self.LENGTH}-character id")
        # 16**5 ≈ 1M ids per prefix; a collision only costs one more draw.
        while True:
            candidate = prefix + "".join(self._rng.choice(_HEX) for _ in range(self.LENGTH - len(prefix)))
            if candidate not in self._issued:
                self._issued.add(candidate)
                return candidate

    @property
    def issued(self) -> frozenset[str]:
        return frozenset(self._issued)

    def rng_state(self) -> tuple:
        return self._rng.getstate()

    def restore(self, rng_state: tuple, issued) -> None:
        """Continue a saved stream: the same next ids, none of `issued` again."""
        self._rng.setstate(rng_state)
        self._issued = set(issued)
