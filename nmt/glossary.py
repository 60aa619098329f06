"""Glossaries and per-sentence constraints: the target terms a translation must contain.

A glossary is a list of (source term, target term) entries, read from TSV (source, a tab, target) or DeepL's CSV
(source,target, optionally followed by the source and target language codes; quoted as CSV quotes). Entries follow
DeepL's rules: both terms non-empty, without control characters or surrounding whitespace, at most
MAX_TERM_BYTES bytes of UTF-8 each, each source term once; at most MAX_ENTRIES entries.

A source term fires in a sentence when its words occur there one after the other. Words are runs of letters and
digits (`\\w`); both sides are NFC-normalized and compared case-insensitively (str.casefold: "Straße" matches
"STRASSE"), and the term's last word may also carry one of the German inflection endings in ENDINGS ("Hund"
matches "Hunde", "Hundes", "Hunden"); stem changes (umlaut plurals such as "Mann" / "Männer") are not matched,
so give them as entries of their own. Where terms overlap in a sentence the longest match wins, and of two as
long the one whose last word is written as in the sentence ("Hunde" over "Hund" in "Hunde"). The target term is
enforced as written (constrained search puts it in the output, it does not inflect it).
"""

from __future__ import annotations

import csv
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nmt.errors import DataError

MAX_ENTRIES = 10_000  # per glossary: enough for a terminology list, small enough to match per sentence cheaply
MAX_TERM_BYTES = 1024  # per term, in UTF-8 (DeepL's limit)
MAX_TERMS_PER_LINE = 32  # target terms a constraints-file line may give
ENDINGS = ("e", "n", "s", "en", "er", "es", "em", "ern", "ens", "ns")  # German inflection endings of a last word
FORMATS = ("tsv", "csv")
PAIR = ("de", "en")  # the language pair of every model nmt trains: what a CSV row's language codes must say
_WORD = re.compile(r"\w+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def written(text: str) -> list[str]:
    """The words of a text as written (NFC): runs of letters and digits."""
    return _WORD.findall(unicodedata.normalize("NFC", text))


def words(text: str) -> list[str]:
    """The normalized words of a text: NFC, runs of letters and digits, each casefolded."""
    return [word.casefold() for word in written(text)]


def check_term(term: object, where: str) -> str:
    """`term` if it is a usable glossary or constraint term, else DataError naming `where` and the fault."""
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
    """Checked (source term, target term) entries (build it with `of`, `parse` or `load_glossary`)."""

    entries: tuple[tuple[str, str], ...]
    _index: dict[str, list[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, list[int]] = {}  # first normalized word -> the entries whose source term starts with it
        for number, (source, _) in enumerate(self.entries):
            index.setdefault(words(source)[0], []).append(number)
        object.__setattr__(self, "_index", index)

    @classmethod
    def of(cls, entries: Mapping[str, str] | Iterable[tuple[str, str]], name: str = "glossary") -> Glossary:
        """A glossary from a {source: target} mapping or (source, target) pairs; DataError names the faulty
        entry (numbered from 1) in `name`."""
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
        """A glossary from the text of a TSV or DeepL CSV file (`fmt`); blank lines are skipped, and DataError
        names the faulty line. A CSV row's language codes, where given, must be `pair`'s (source, target)."""
        if fmt not in FORMATS:
            raise DataError(f"{name}: entries format {fmt!r} is not one of {', '.join(FORMATS)}")
        lines = text.splitlines()
        if len(lines) > MAX_ENTRIES * 2:  # before parsing a huge file: blank lines aside, it is too long anyway
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
        """The entries as TSV, one per line."""
        return "".join(f"{source}\t{target}\n" for source, target in self.entries)

    def terms_for(self, sentence: str) -> list[str]:
        """The target terms `sentence` calls for, in the order their source terms occur (see the module's rules)."""
        as_written = written(sentence)
        found = [word.casefold() for word in as_written]
        matches: list[tuple[int, int, bool, bool, int]] = []  # (start, end, through an ending, in another case,
        for start, word in enumerate(found):                    # entry)
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
    """Whether the sentence's words `found` are the term's, the last one perhaps with an inflection ending."""
    *head, last = term
    *found_head, found_last = found
    return list(head) == list(found_head) and (
        found_last == last or any(found_last == last + ending for ending in ENDINGS))


def check_targets(glossary: Glossary, encode: Callable[[Sequence[str]], object], name: str = "glossary") -> None:
    """DataError naming the first entry whose target term `encode` (`Translator.encode_terms`, which refuses a term
    its vocabulary cannot write) refuses."""
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
    """Whether the sentence's words `found` are written as the term writes its words (the last one perhaps with an
    ending)."""
    return list(term[:-1]) == list(found[:-1]) and found[-1].startswith(term[-1])


def load_glossary(path: str | Path) -> Glossary:
    """The glossary in a file: DeepL CSV when its name ends in .csv, TSV otherwise; DataError names the file and
    line at fault."""
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
    """A language code as a glossary compares it: its primary subtag in lower case (`EN-GB`: en)."""
    return code.strip().partition("-")[0].lower()


def constraint_terms(line: str, where: str) -> list[str]:
    """The target terms of one line of a constraints file: tab-separated, as fairseq's --constraints reads them;
    a blank line gives none."""
    if not line.strip():
        return []
    terms = line.split("\t")
    if len(terms) > MAX_TERMS_PER_LINE:
        raise DataError(f"{where}: {len(terms)} terms; a line gives at most {MAX_TERMS_PER_LINE}")
    return [check_term(term, where) for term in terms]


GlossaryLike = Glossary | Mapping[str, str] | Iterable[tuple[str, str]] | str | Path | None


def as_glossary(glossary: GlossaryLike) -> Glossary | None:
    """A `Glossary` from what a caller may pass: a glossary, a {source: target} mapping, (source, target) pairs, or
    the path of a TSV or CSV file (a str or Path); None stays None."""
    if glossary is None or isinstance(glossary, Glossary):
        return glossary
    if isinstance(glossary, (str, Path)):
        return load_glossary(glossary)
    return Glossary.of(glossary)


def line_terms(lines: Sequence[str], glossary: GlossaryLike = None,
               constraints: Sequence[Sequence[str]] | None = None) -> list[list[str]] | None:
    """Per line, the target terms its translation must contain: those its glossary entries call for, then its own
    `constraints` (one list of terms per line); None when neither is given."""
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
