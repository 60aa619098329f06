"""One-pass, bounded-memory stream samplers: a reservoir sample for the tokenizer, first occurrences for dedup."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np


class Reservoir:
    """A seeded uniform sample of k items from a stream (Li's algorithm L, which skips ahead)."""

    def __init__(self, k: int, seed: int) -> None:
        self.k, self.rng = k, random.Random(seed)
        self.items: list[tuple[int, bytes]] = []
        self.w = math.exp(math.log(self._uniform()) / k)
        self.next = k + self._skip()

    def _uniform(self) -> float:
        return 1.0 - self.rng.random()  # in (0, 1]: never log(0)

    def _skip(self) -> int:
        if self.w >= 1.0:
            return 1 << 62
        return int(math.log(self._uniform()) / math.log1p(-self.w))

    def offer(self, start: int, lines: Callable[[], list[bytes]], n: int) -> None:
        """Consider items start .. start + n - 1; `lines()` gives them when any is chosen."""
        chosen: list[bytes] | None = None
        for i in range(start, min(start + n, self.k)):
            chosen = chosen or lines()
            self.items.append((i, chosen[i - start]))
        while self.next < start + n:
            chosen = chosen or lines()
            self.items[self.rng.randrange(self.k)] = (self.next, chosen[self.next - start])
            self.w *= math.exp(math.log(self._uniform()) / self.k)
            self.next += self._skip() + 1

    def sample(self) -> list[bytes]:
        """The chosen items in stream order."""
        return [line for _, line in sorted(self.items)]


class FirstSeen:
    """Marks the first occurrence of each hash in a stream of pieces, keeping seen hashes as sorted runs each over
    twice the next's length (O(log n) runs)."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def mark(self, hashes: np.ndarray) -> np.ndarray:
        """(n,) bool: True where hashes[i] is seen for the first time."""
        unique, index = np.unique(hashes, return_index=True)  # (u,) sorted, (u,) first positions
        new = np.ones(len(unique), dtype=bool)
        for run in self.runs:
            at = np.minimum(np.searchsorted(run, unique), len(run) - 1)  # (u,)
            new &= run[at] != unique
        first = np.zeros(len(hashes), dtype=bool)
        first[index[new]] = True
        if new.any():
            self.runs.append(unique[new])
            while len(self.runs) > 1 and len(self.runs[-2]) <= 2 * len(self.runs[-1]):
                last = self.runs.pop()
                self.runs[-1] = np.sort(np.concatenate([self.runs[-1], last]), kind="stable")

        return first
