"""Word alignment by eflomal (a word aligner no one here wrote), as the markup and constraints benchmarks judge
with it: trained on the pairs to align together with a training set, unsupervised, lowercased, links of both
directions intersected. Install it with the align extra (`pip install -e '.[align]'`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from nmt.errors import NmtError

Links = set[tuple[int, int]]  # (source word, target word), counted from 0 over whitespace-separated words


def aligner() -> type:
    """eflomal's Aligner class; NmtError in one line when eflomal is not installed."""
    try:
        from eflomal import Aligner
    except ImportError:
        raise NmtError("eflomal is not installed; install the align extra: pip install -e '.[align]'") from None
    return Aligner


def eflomal_links(pairs: list[tuple[str, str]], train: tuple[list[str], list[str]]) -> dict[tuple[str, str], Links]:
    """eflomal's links of each (source, target) pair (words: whitespace-separated), both directions intersected,
    trained on the distinct pairs with the training set's (sources, targets), all lowercased."""
    model = aligner()()
    unique = list(dict.fromkeys(pairs))
    sources = [s.lower() for s in train[0]] + [s.lower() for s, _ in unique]
    targets = [t.lower() for t in train[1]] + [t.lower() for _, t in unique]
    with tempfile.TemporaryDirectory(prefix="bench_align.") as folder:
        forward, reverse = Path(folder) / "fwd", Path(folder) / "rev"
        model.align(sources, targets, links_filename_fwd=str(forward), links_filename_rev=str(reverse))
        both = [_links(a) & _links(b) for a, b in zip(forward.read_text().splitlines()[len(train[0]):],
                                                        reverse.read_text().splitlines()[len(train[0]):])]
    return dict(zip(unique, both))


def _links(line: str) -> Links:
    return {tuple(int(n) for n in link.split("-")) for link in line.split()}
