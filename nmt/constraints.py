"""What a hypothesis of constrained search has met of its sentence's target terms, and which tokens take it further.

A term is met once its tokens occur contiguously in the output; a term in progress is followed with the
Knuth-Morris-Pratt automaton, so overlapping terms are each followed on their own. A hypothesis's bank is the length of
its met terms plus its longest prefix in progress (Post & Vilar 2018; Hu et al. 2019).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace


def _failure(term: tuple[int, ...]) -> tuple[int, ...]:
    """KMP failure function: for each prefix length i + 1, the length of its longest proper border."""
    fail = [0] * len(term)
    k = 0
    for i in range(1, len(term)):
        while k and term[i] != term[k]:
            k = fail[k - 1]
        if term[i] == term[k]:
            k += 1
        fail[i] = k
    return tuple(fail)


@dataclass(frozen=True)
class Constraints:
    """One sentence's terms (deduplicated, non-empty token sequences) and their KMP tables."""

    terms: tuple[tuple[int, ...], ...]
    failures: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, terms: Sequence[Sequence[int]]) -> Constraints:
        """The constraints of a sentence; empty terms are dropped and repeated ones kept once."""
        unique = tuple(dict.fromkeys(tuple(int(t) for t in term) for term in terms if len(term)))
        return cls(unique, tuple(_failure(term) for term in unique))

    @property
    def tokens(self) -> int:
        """The constraint tokens in all: a hypothesis' bank is at most this."""
        return sum(len(term) for term in self.terms)

    def start(self) -> Standing:
        """The standing of an empty output."""
        return Standing(self, (0,) * len(self.terms), (False,) * len(self.terms), len(self.terms), 0, False)


@dataclass(frozen=True)
class Standing:
    """One hypothesis' standing: per term, whether it is met, and otherwise how many of its tokens the output ends
    with; `unmet` counts the terms not yet met, `bank` the constraint tokens produced (the lengths of the met
    terms plus the longest prefix in progress), and `completed` whether the last token ended a term."""

    constraints: Constraints
    matched: tuple[int, ...]
    met: tuple[bool, ...]
    unmet: int
    bank: int
    completed: bool

    def wanted(self) -> set[int]:
        """The tokens that would take an unmet term a step further: the next token of each, and each's first."""
        out: set[int] = set()
        for term, matched, met in zip(self.constraints.terms, self.matched, self.met):
            if not met:
                out.update((term[matched], term[0]))
        return out

    def advance(self, token: int) -> Standing:
        """The standing after the output grows by `token`."""
        if self.unmet == 0:
            return replace(self, completed=False) if self.completed else self
        matched, met = list(self.matched), list(self.met)
        for i, (term, fail) in enumerate(zip(self.constraints.terms, self.constraints.failures)):
            if met[i]:
                continue
            k = matched[i]
            while k and term[k] != token:
                k = fail[k - 1]
            if term[k] == token:
                k += 1
            if k == len(term):
                met[i], k = True, 0
            matched[i] = k
        done = sum(len(term) for term, m in zip(self.constraints.terms, met) if m)
        bank = done + max((m for m, is_met in zip(matched, met) if not is_met), default=0)
        return Standing(self.constraints, tuple(matched), tuple(met), met.count(False), bank,
                        met.count(True) > self.met.count(True))
