"""Glossaries and per-sentence constraints: the target terms a translation must contain.

Glossaries are read from TSV or DeepL's CSV and follow DeepL's entry rules. A source term fires when its words
(NFC, casefolded) occur in a row, its last word perhaps with a German ending from ENDINGS ("Hund" matches "Hunden";
umlaut plurals need entries of their own). Overlaps go to the longest match, then the one written as in the
sentence. Target terms are enforced as written, never inflected.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nmt.errors import DataError

MAX_ENTRIES = 10_000
MAX_TERM_BYTES = 1024  # UTF-8, DeepL's limit
MAX_TERMS_PER_LINE = 32  # in a constraints file
ENDINGS = ("e", "n", "s", "en", "er", "es", "em", "ern", "ens", "ns")
FORMATS = ("tsv", "csv")
PAIR = ("de", "en")  # what a CSV row's language codes must say
_WORD = re.compile(r"\w+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def written(text: str) -> list[str]:
    """The text's NFC words as written."""
    return _WORD.findall(unicodedata.normalize("NFC", text))


def words(text: str) -> list[str]:
    """The text's NFC words, casefolded."""
    return [word.casefold() for word in written(text)]


def check_term(term: object, where: str) -> str:
    """`term` if usable as a glossary or constraint term, else DataError naming `where`."""
    if not isinstance(term, str):
        raise DataError(f"{where}: a term must be text, not {type(term).__name__}")
    if not term:
        raise DataError(f"{where}: empty term")
    if len(term.encode("utf-8", "surrogatepass")) > MAX_TERM_BYTES:
        raise DataError(f"{where}: a term of {len(term):,} characters; at most {MAX_TERM_BYTES} bytes of UTF-8")
    if _CONTROL.search(term):
        raise DataError(f"{where}: a term holds a control character (a tab, a newline, ...)")
    if term != term.strip():
        raise DataError(f"{where}: a term begins or ends with whitespace")
    return term


@dataclass(frozen=True)
class Glossary:
    """Checked (source, target) entries; build with `of`, `parse` or `load_glossary`."""

    entries: tuple[tuple[str, str], ...]
    _index: dict[str, list[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, list[int]] = {}  # first source word -> entries
        for number, (source, _) in enumerate(self.entries):
            index.setdefault(words(source)[0], []).append(number)
        object.__setattr__(self, "_index", index)

    @classmethod
    def of(cls, entries: Mapping[str, str] | Iterable[tuple[str, str]], name: str = "glossary") -> Glossary:
        """A glossary from a mapping or pairs; DataError names the faulty entry."""
        pairs = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
        if len(pairs) > MAX_ENTRIES:
            raise DataError(f"{name}: {len(pairs):,} entries; a glossary holds at most {MAX_ENTRIES:,}")
        seen: set[str] = set()
        checked = []
        for number, pair in enumerate(pairs, 1):
            where = f"{name} entry {number}"
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise DataError(f"{where}: expected a source term and a target term")
            source, target = check_term(pair[0], where), check_term(pair[1], where)
            if not words(source):
                raise DataError(f"{where}: the source term {source!r} has no letters or digits to match")
            if source in seen:
                raise DataError(f"{where}: the source term {source!r} is given twice")
            seen.add(source)
            checked.append((source, target))
        return cls(tuple(checked))

    @classmethod
    def parse(cls, text: str, fmt: str = "tsv", name: str = "glossary", pair: tuple[str, str] = PAIR) -> Glossary:
        """A glossary from TSV or DeepL CSV text; CSV language codes must match `pair`. DataError names the line."""
        if fmt not in FORMATS:
            raise DataError(f"{name}: entries format {fmt!r} is not one of {', '.join(FORMATS)}")
        lines = text.splitlines()
        if len(lines) > MAX_ENTRIES * 2:  # too long even with blank lines
            raise DataError(f"{name}: {len(lines):,} lines; a glossary holds at most {MAX_ENTRIES:,} entries")
        rows = csv.reader(lines, strict=True) if fmt == "csv" else (line.split("\t") for line in lines)
        pairs = []
        try:
            for number, row in enumerate(rows, 1):
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != 2 and not (fmt == "csv" and len(row) == 4):
                    expected = "source,target (or source,target,source_lang,target_lang)" if fmt == "csv" else \
                        "a source term, a tab and a target term"
                    raise DataError(f"{name} line {number}: {len(row)} columns; expected {expected}")
                if len(row) == 4 and [_language(code) for code in row[2:]] != list(pair):
                    raise DataError(f"{name} line {number}: the languages {row[2]!r} to {row[3]!r}; this glossary "
                                    f"is for {pair[0]} to {pair[1]}")
                pairs.append((number, row[0], row[1]))
        except csv.Error as err:
            raise DataError(f"{name}: not valid CSV ({err})") from None
        if len(pairs) > MAX_ENTRIES:
            raise DataError(f"{name}: {len(pairs):,} entries; a glossary holds at most {MAX_ENTRIES:,}")
        for number, source, target in pairs:
            for term in (source, target):
                check_term(term, f"{name} line {number}")
        seen: dict[str, int] = {}
        for number, source, _ in pairs:
            if source in seen:
                raise DataError(f"{name} line {number}: the source term {source!r} is also on line {seen[source]}")
            seen[source] = number
        return cls.of([(source, target) for _, source, target in pairs], name)

    def __len__(self) -> int:
        return len(self.entries)

    def to_tsv(self) -> str:
        return "".join(f"{source}\t{target}\n" for source, target in self.entries)

    def terms_for(self, sentence: str) -> list[str]:
        """The target terms `sentence` calls for, in source order."""
        as_written = written(sentence)
        found = [word.casefold() for word in as_written]
        matches: list[tuple[int, int, bool, bool, int]] = []  # start, end, inflected, other case, entry
        for start, word in enumerate(found):
            stems = (word[:-len(e)] for e in ENDINGS if word.endswith(e) and len(word) > len(e))
            for key in dict.fromkeys((word, *stems)):
                for number in self._index.get(key, ()):
                    source = self.entries[number][0]
                    term = words(source)
                    end = start + len(term)
                    if end <= len(found) and _same(term, found[start:end]):
                        matches.append((start, end, found[end - 1] != term[-1],
                                        not _same_case(written(source), as_written[start:end]), number))
        chosen: list[tuple[int, int, bool, bool, int]] = []
        for match in sorted(matches, key=lambda m: (m[0] - m[1], m[2], m[3], m[4], m[0])):
            if all(match[1] <= s or match[0] >= e for s, e, *_ in chosen):  # longest, exact, same case, listed first
                chosen.append(match)
        return list(dict.fromkeys(self.entries[match[4]][1] for match in sorted(chosen)))


def _same(term: tuple[str, ...], found: Sequence[str]) -> bool:
    """Whether `found` are the term's words, the last perhaps inflected."""
    *head, last = term
    *found_head, found_last = found
    return list(head) == list(found_head) and (
        found_last == last or any(found_last == last + ending for ending in ENDINGS))


def check_targets(glossary: Glossary, encode: Callable[[Sequence[str]], object], name: str = "glossary") -> None:
    """DataError naming the first entry whose target term `encode` refuses."""
    try:
        encode([target for _, target in glossary.entries])
    except DataError:
        for number, (_, target) in enumerate(glossary.entries, 1):
            try:
                encode([target])
            except DataError as err:
                raise DataError(f"{name} entry {number}: {err}") from None
        raise


def _same_case(term: Sequence[str], found: Sequence[str]) -> bool:
    """Whether `found` is written in the term's case."""
    return list(term[:-1]) == list(found[:-1]) and found[-1].startswith(term[-1])


def load_glossary(path: str | Path) -> Glossary:
    """The glossary in a .csv (DeepL) or TSV file; DataError names the file and line."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_ENTRIES * 2 * (MAX_TERM_BYTES + 2):
            raise DataError(f"{path}: {size:,} bytes is too large for a glossary of at most {MAX_ENTRIES:,} entries")
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise DataError(f"{path}: cannot read the glossary ({err.strerror})") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: the glossary is not valid UTF-8") from None
    return Glossary.parse(text.removeprefix("\ufeff"), "csv" if path.suffix.lower() == ".csv" else "tsv", str(path))


def _language(code: str) -> str:
    """A language code's primary subtag, lower case (`EN-GB`: en)."""
    return code.strip().partition("-")[0].lower()


def constraint_terms(line: str, where: str) -> list[str]:
    """The tab-separated target terms of a constraints-file line (as fairseq's --constraints)."""
    if not line.strip():
        return []
    terms = line.split("\t")
    if len(terms) > MAX_TERMS_PER_LINE:
        raise DataError(f"{where}: {len(terms)} terms; a line gives at most {MAX_TERMS_PER_LINE}")
    return [check_term(term, where) for term in terms]


GlossaryLike = Glossary | Mapping[str, str] | Iterable[tuple[str, str]] | str | Path | None


def as_glossary(glossary: GlossaryLike) -> Glossary | None:
    """A `Glossary` from a glossary, mapping, pairs or file path; None stays None."""
    if glossary is None or isinstance(glossary, Glossary):
        return glossary
    if isinstance(glossary, (str, Path)):
        return load_glossary(glossary)
    return Glossary.of(glossary)


def line_terms(lines: Sequence[str], glossary: GlossaryLike = None,
               constraints: Sequence[Sequence[str]] | None = None) -> list[list[str]] | None:
    """Per line, the target terms its glossary calls for, then its `constraints`; None when neither is given."""
    glossary = as_glossary(glossary)
    if glossary is None and constraints is None:
        return None
    if constraints is not None:
        if isinstance(constraints, str) or len(constraints) != len(lines):
            raise DataError(f"constraints: give one list of target terms per line ({len(lines)})")
        for number, terms in enumerate(constraints, 1):
            if not isinstance(terms, (list, tuple)) or len(terms) > MAX_TERMS_PER_LINE:
                raise DataError(f"constraints of line {number}: expected a list of at most {MAX_TERMS_PER_LINE} "
                                "target terms")
            for term in terms:
                check_term(term, f"constraints of line {number}")
    out = []
    for index, line in enumerate(lines):
        found = glossary.terms_for(line) if glossary is not None else []
        out.append(list(dict.fromkeys([*found, *(constraints[index] if constraints is not None else [])])))
    return out
