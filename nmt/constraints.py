"""Constrained search's progress through a sentence's target terms, each followed by a KMP automaton
(Post & Vilar 2018; Hu et al. 2019)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace


def _failure(term: tuple[int, ...]) -> tuple[int, ...]:
    """KMP failure function: each prefix's longest proper border."""
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
    """One sentence's distinct, non-empty terms and their KMP tables."""

    terms: tuple[tuple[int, ...], ...]
    failures: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, terms: Sequence[Sequence[int]]) -> Constraints:
        unique = tuple(dict.fromkeys(tuple(int(t) for t in term) for term in terms if len(term)))
        return cls(unique, tuple(_failure(term) for term in unique))

    @property
    def tokens(self) -> int:
        """All constraint tokens: the largest bank."""
        return sum(len(term) for term in self.terms)

    def start(self) -> Standing:
        """The standing of an empty output."""
        return Standing(self, (0,) * len(self.terms), (False,) * len(self.terms), len(self.terms), 0, False)


@dataclass(frozen=True)
class Standing:
    """One hypothesis' progress: per term, met or the prefix length matched; `bank` is the met terms' lengths
    plus the longest prefix, `completed` whether the last token ended a term."""

    constraints: Constraints
    matched: tuple[int, ...]
    met: tuple[bool, ...]
    unmet: int
    bank: int
    completed: bool

    def wanted(self) -> set[int]:
        """Each unmet term's next token and first token."""
        out: set[int] = set()
        for term, matched, met in zip(self.constraints.terms, self.matched, self.met):
            if not met:
                out.update((term[matched], term[0]))
        return out

    def advance(self, token: int) -> Standing:
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
