"""Translating an HTML or XML document while keeping its markup byte for byte.

HTML is read with `html.parser` (an unclosed tail is kept, untranslated), XML with expat (entity declarations
refused). Each block's text is split into sentences and translated; each inline tag goes before the first or after
the last target word aligned to the source words it covers (to the sentence's edges without an alignment).
`<code>`, `<pre>`, `<script>`, `<style>`, `translate="no"` and `ignore_tags` elements are left alone.
"""

from __future__ import annotations

import bisect
import html
import re
import xml.parsers.expat
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser

import numpy as np

from nmt.errors import MarkupError, excerpt
from nmt.sentences import split

FORMATS = ("html", "xml")
IGNORED = frozenset({"code", "pre"})  # both formats: their text is left alone
HTML_IGNORED = frozenset({"script", "style", "textarea"})
# HTML elements that flow inside a sentence; any other element ends a block
HTML_INLINE = frozenset({"a", "abbr", "b", "bdi", "bdo", "big", "cite", "data", "del", "dfn", "em", "font", "i",
                         "img", "ins", "kbd", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub",
                         "sup", "time", "tt", "u", "var", "wbr"})
HTML_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
                       "source", "track", "wbr"})
HTML_ESCAPES = {"&": "&amp;", "<": "&lt;"}
XML_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
WRAPPER = "nmt-fragment"  # the element an XML fragment is parsed inside (never written out)
# reading holds many times a document's size in objects
MAX_DOCUMENT_CHARS = 2_000_000
BOM = "\ufeff"


@dataclass(frozen=True)
class Aligned:
    """One sentence's translation and scores; `weights[t, s]` links target word t to source word s (or None)."""

    text: str
    weights: np.ndarray | None = None  # (target words, source words)
    score: float = 0.0  # length-penalized
    log_prob: float = 0.0  # summed, EOS included
    tokens: int = 0  # subwords scored, EOS included (0: no hypothesis)


SentenceTranslator = Callable[[list[str]], list[Aligned]]
Splitter = Callable[[str], list[tuple[int, int]]]  # (start, end) character spans


@dataclass(slots=True)
class _Token:
    """One parser event with its text as written."""

    kind: str  # text, start, end, empty, other (comment, declaration, CDATA, ...)
    raw: str
    value: str = ""  # text with entities decoded
    entity: bool = False
    name: str = ""
    element: int = -1


@dataclass(slots=True)
class _Element:
    name: str
    parent: int  # -1: the document
    ignored: bool
    start: int  # token index
    end: int | None = None  # None: closed implicitly or empty
    has_text: bool = False  # non-blank text directly inside it
    inline: bool = False


@dataclass
class _Document:
    tokens: list[_Token] = field(default_factory=list)
    elements: list[_Element] = field(default_factory=list)
    root_text: bool = False  # non-blank text outside every element


def translate_document(document: str, format: str, translate: SentenceTranslator, *,
                       ignore_tags: Collection[str] = (), split: Splitter | None = None) -> str:
    """`document` ("html" or "xml") with its blocks' sentences translated in one `translate` call; `split` cuts
    blocks into sentences (default: one per block). Raises `MarkupError` on unreadable or oversized documents."""
    if format not in FORMATS:
        raise MarkupError(f"format {format!r}: choose one of {', '.join(FORMATS)}")
    if not isinstance(document, str):
        raise MarkupError(f"expected the document as a str, got {type(document).__name__}")
    if len(document) > MAX_DOCUMENT_CHARS:
        raise MarkupError(f"a document of {len(document):,} characters; at most {MAX_DOCUMENT_CHARS:,} are read "
                          "(split it into smaller documents)")
    bom = BOM if document.startswith(BOM) else ""
    document = document[len(bom):]
    names = [ignore_tags] if isinstance(ignore_tags, str) else list(ignore_tags)
    if not all(isinstance(name, str) for name in names):
        raise MarkupError("ignore_tags: give element names (str)")
    if format == "html":
        names = [name.lower() for name in names] + list(HTML_IGNORED)
    ignored = frozenset(IGNORED | set(names))
    doc = _read_html(document, ignored) if format == "html" else _read_xml(document, ignored)
    _mark_inline(doc, format)
    escapes = XML_ESCAPES if format == "xml" else HTML_ESCAPES
    runs = _runs(doc)
    blocks = [_Block(doc.tokens[start:end], split or _whole, escapes) for start, end in runs]
    sentences = [sentence for block in blocks for sentence in block.sentences()]
    results = translate(sentences) if sentences else []
    if len(results) != len(sentences):
        raise MarkupError(f"the translator gave {len(results)} translations for {len(sentences)} sentences")
    out, done, at = [bom], 0, 0
    for (start, end), block in zip(runs, blocks):
        out += [token.raw for token in doc.tokens[at:start]]
        count = len(block.spans)
        out.append(block.render(results[done:done + count]))
        done, at = done + count, end
    out += [token.raw for token in doc.tokens[at:]]
    return "".join(out)


def splitter(mode: str | bool, language: str) -> Splitter:
    """`nmt.sentences.split` as a `Splitter`."""
    def spans(text: str) -> list[tuple[int, int]]:
        pieces, out, at = split(text, mode, language=language), [], 0
        for gap, sentence in zip(pieces.gaps, pieces.sentences):
            at += len(gap)
            out.append((at, at + len(sentence)))
            at += len(sentence)
        return out
    return spans


def word_weights(src_pieces: Sequence[str], tgt_pieces: Sequence[str], weights: np.ndarray, src_words: int,
                 tgt_words: int) -> np.ndarray:
    """Subword attention (target pieces, source pieces), EOS dropped, summed into (tgt_words, src_words)."""
    rows = _word_index([p for p in tgt_pieces if p != "</s>"], tgt_words)
    cols = _word_index([p for p in src_pieces if p != "</s>"], src_words)
    out = np.zeros((tgt_words, src_words), dtype=np.float64)
    if tgt_words and src_words:
        np.add.at(out, (rows[:, None], cols[None, :]), weights[:len(rows), :len(cols)])
    return out


def _word_index(pieces: Sequence[str], words: int) -> np.ndarray:
    """The word each piece belongs to ("▁" starts a word), clipped to [0, words)."""
    index, current = [], -1
    for piece in pieces:
        if piece.startswith("\u2581") or current < 0:
            current += 1
        index.append(min(current, max(words - 1, 0)))
    return np.asarray(index, dtype=np.int64)


def _whole(text: str) -> list[tuple[int, int]]:
    """The text as one sentence, stripped."""
    start = len(text) - len(text.lstrip())
    return [(start, len(text.rstrip()))]


class _HtmlEvents(HTMLParser):
    """html.parser's events with the document offset where each begins."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.events: list[tuple[str, int, str, dict]] = []  # kind, offset, name, attributes
        self.line_starts = [0] + [i + 1 for i, c in enumerate(document) if c == "\n"]

    def position(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _add(self, kind: str, name: str = "", attrs: list | None = None) -> None:
        attributes = {key: value or "" for key, value in attrs or ()}
        self.events.append((kind, self.position(), name, attributes))

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._add("empty" if tag in HTML_VOID else "start", tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self._add("empty", tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        self._add("end", tag)

    def handle_data(self, data: str) -> None:
        self._add("text")

    def _other(self, data: str) -> None:
        self._add("other")

    handle_comment = handle_decl = unknown_decl = handle_pi = _other


def _read_html(document: str, ignored: frozenset[str]) -> _Document:
    """The HTML's tokens. Fed without `close`, the parser stops at a construct that never ends; that tail is kept
    untranslated, as a browser never shows it."""
    parser = _HtmlEvents(document)
    try:
        parser.feed(document)
    except Exception as err:  # noqa: BLE001 - html.parser raises AssertionError (and more) on bogus declarations
        before = document[:parser.position()]
        column = len(before) - (before.rfind("\n") + 1) + 1
        raise MarkupError(f"HTML that cannot be read at line {before.count(chr(10)) + 1}, column {column}: "
                          f"{type(err).__name__}: {excerpt(str(err), 80)}") from None
    tail = len(document) - len(parser.rawdata)
    events = [*parser.events, ("tail", tail, "", {})]
    unclosed = parser.cdata_elem is not None or parser.rawdata.startswith("<")
    doc, builder = _Document(), _Builder(ignored)
    if events[0][1] > 0:
        doc.tokens.append(_Token("other", document[:events[0][1]]))
    for number, (kind, offset, name, attrs) in enumerate(events[:-1]):
        raw = document[offset:events[number + 1][1]]
        if kind == "text":
            doc.tokens += _text_tokens(raw)
        else:
            builder.add(doc, kind, raw, name, attrs)
    if tail < len(document):
        doc.tokens += [_Token("other", document[tail:])] if unclosed else _text_tokens(document[tail:])
    builder.finish(doc)
    return doc


_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")  # as html.unescape finds them


def _text_tokens(raw: str) -> list[_Token]:
    """A text event's text and character references; unknown references and anything after the text (a stray
    "</>") are kept as markup."""
    end = raw.find("<", 1) if raw.startswith("<") else raw.find("<")
    text, rest = (raw, "") if end < 0 else (raw[:end], raw[end:])
    tokens, at = [], 0
    for found in _CHARREF.finditer(text):
        if found.start() > at:
            tokens.append(_Token("text", text[at:found.start()], text[at:found.start()]))
        value = html.unescape(found.group())
        tokens.append(_Token("text", found.group(), value, entity=True) if value != found.group() else
                      _Token("other", found.group()))
        at = found.end()
    if at < len(text):
        tokens.append(_Token("text", text[at:], text[at:]))
    return tokens + ([_Token("other", rest)] if rest else [])


def _read_xml(document: str, ignored: frozenset[str]) -> _Document:
    """The XML's tokens; a fragment without one root (as DeepL's clients send) is read inside a wrapper."""
    data = document.encode("utf-8")
    fragment = not document.lstrip().startswith(("<?xml", "<!DOCTYPE"))
    head = f"<{WRAPPER}>".encode() if fragment else b""
    parser = xml.parsers.expat.ParserCreate("utf-8")  # the text is Unicode already, whatever it declares
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    events: list[tuple[str, int, str, str, dict]] = []  # kind, byte offset, text, name, attributes
    in_cdata = []

    def add(kind: str, value: str = "", name: str = "", attrs: dict | None = None) -> None:
        events.append((kind, parser.CurrentByteIndex - len(head), value, name, attrs or {}))

    def refuse(*_args: object) -> None:
        raise MarkupError("the XML declares entities, which are not expanded here; send it without a DTD")

    def cdata(starts: bool) -> None:
        in_cdata.append(True) if starts else in_cdata.pop()
        add("other")

    parser.StartElementHandler = lambda name, attrs: add("start", name=name, attrs=attrs)
    parser.EndElementHandler = lambda name: add("end", name=name)
    parser.CharacterDataHandler = lambda text: add("other" if in_cdata else "text", text)
    parser.StartCdataSectionHandler = lambda: cdata(True)
    parser.EndCdataSectionHandler = lambda: cdata(False)
    parser.EntityDeclHandler = parser.UnparsedEntityDeclHandler = refuse
    parser.DefaultHandler = lambda _text: add("other")
    try:
        parser.Parse(head, False)
        parser.Parse(data, False)
        parser.Parse(f"</{WRAPPER}>".encode() if fragment else b"", True)
    except MarkupError:
        raise
    except Exception as err:  # noqa: BLE001 - the document's fault
        if not isinstance(err, xml.parsers.expat.ExpatError):
            raise MarkupError(f"XML that cannot be read: {type(err).__name__}: {excerpt(str(err), 80)}") from None
        if fragment and parser.ErrorByteIndex >= len(head) + len(data):
            unclosed = _unclosed(events, data)
            raise MarkupError("not well-formed XML: " + (f"{unclosed} is not closed" if unclosed else
                              "it ends inside a tag, comment, CDATA section or processing instruction")) from None
        column = err.offset - (len(head) if err.lineno == 1 else 0)
        raise MarkupError(f"not well-formed XML at line {err.lineno}, column {column + 1}: "
                          f"{xml.parsers.expat.ErrorString(err.code)}") from None
    if fragment:
        events = events[1:-1]
    doc, builder = _Document(), _Builder(ignored)
    if events and events[0][1] > 0:
        doc.tokens.append(_Token("other", document[:len(data[:events[0][1]].decode("utf-8"))]))
    for number, (kind, offset, value, name, attrs) in enumerate(events):
        raw = data[offset:events[number + 1][1] if number + 1 < len(events) else len(data)].decode("utf-8")
        if kind == "text":
            doc.tokens.append(_Token("text", raw, value, entity=raw != value))
        elif kind == "end" and raw == "":  # <x/>
            builder.close_empty(doc)
        else:
            builder.add(doc, kind, raw, name, attrs)
    builder.finish(doc)
    return doc


def _unclosed(events: list[tuple[str, int, str, str, dict]], data: bytes) -> str | None:
    """The innermost element left open in a fragment, and where (None: none)."""
    stack = []
    for kind, offset, _value, name, _attrs in events[1:]:
        if kind == "start":
            stack.append((name, offset))
        elif kind == "end" and stack:
            stack.pop()
    if not stack:
        return None
    name, offset = stack[-1]
    before = data[:offset].decode("utf-8")
    line = before.count("\n") + 1
    return f"<{name}> at line {line}, column {len(before) - (before.rfind(chr(10)) + 1) + 1}"


class _Builder:
    """Elements from tags: an end tag also closes those left open inside it; one closing nothing is markup."""

    def __init__(self, ignored: frozenset[str]) -> None:
        self.ignored, self.stack = ignored, []
        self.open_names: dict[str, int] = {}  # name -> open count

    def add(self, doc: _Document, kind: str, raw: str, name: str = "", attrs: dict | None = None) -> None:
        parent = self.stack[-1] if self.stack else -1
        if kind in ("start", "empty"):
            no = str((attrs or {}).get("translate", "")).strip().lower() == "no"
            ignored = name in self.ignored or no or (parent >= 0 and doc.elements[parent].ignored)
            doc.elements.append(_Element(name, parent, ignored, len(doc.tokens)))
            doc.tokens.append(_Token(kind, raw, name=name, element=len(doc.elements) - 1))
            if kind == "start":
                self.stack.append(len(doc.elements) - 1)
                self.open_names[name] = self.open_names.get(name, 0) + 1
        elif kind == "end" and self.open_names.get(name):
            while True:
                element = self.stack.pop()
                self.open_names[doc.elements[element].name] -= 1
                if doc.elements[element].name == name:
                    break
            doc.elements[element].end = len(doc.tokens)
            doc.tokens.append(_Token("end", raw, name=name, element=element))
        else:
            doc.tokens.append(_Token("other", raw))

    def close_empty(self, doc: _Document) -> None:
        element = self.stack.pop()
        self.open_names[doc.elements[element].name] -= 1
        doc.tokens[doc.elements[element].start].kind = "empty"

    def finish(self, doc: _Document) -> None:
        """Note which elements (and whether the document) hold text directly."""
        for owner, token in zip(_owners(doc), doc.tokens):
            if token.kind == "text" and token.value.strip():
                if owner < 0:
                    doc.root_text = True
                else:
                    doc.elements[owner].has_text = True


def _owners(doc: _Document) -> list[int]:
    """The element each token stands in (-1: the document; a tag: its element's parent)."""
    owners, open_elements = [], []
    for token in doc.tokens:
        if token.kind == "end":
            while open_elements and open_elements.pop() != token.element:
                pass
        owners.append(doc.elements[token.element].parent if token.element >= 0 else
                      open_elements[-1] if open_elements else -1)
        if token.kind == "start":
            open_elements.append(token.element)
    return owners


def _mark_inline(doc: _Document, format: str) -> None:
    """An element is inline when it flows in a sentence (HTML: by name; XML: its parent holds text) and holds
    only inline elements."""
    blocky = [False] * len(doc.elements)
    for number in range(len(doc.elements) - 1, -1, -1):
        element = doc.elements[number]
        if format == "html":
            flows = element.name in HTML_INLINE
        else:
            flows = doc.elements[element.parent].has_text if element.parent >= 0 else doc.root_text
        element.inline = flows and not element.ignored and not blocky[number]
        if not element.inline and element.parent >= 0:
            blocky[element.parent] = True


def _runs(doc: _Document) -> list[tuple[int, int]]:
    """Token ranges of maximal runs of text and inline markup outside ignored elements."""
    outside = [not doc.elements[token.element].inline if token.element >= 0 else
               owner >= 0 and doc.elements[owner].ignored for owner, token in zip(_owners(doc), doc.tokens)]
    runs, start = [], None
    for number, out in enumerate([*outside, True]):
        if not out and start is None:
            start = number
        elif out and start is not None:
            runs.append((start, number))
            start = None
    return runs


@dataclass
class _Event:
    """An inline tag in a block and its offset in the plain text."""

    token: _Token
    offset: int
    role: str  # open, close (both tags in the block), point (any other markup)
    side: str = "after"  # at a space in the translation: before, after or free (spaces on both sides)


class _Block:
    """A run of text and inline markup. Tags go between units (a word's leading punctuation, core, trailing
    punctuation), so `<i>sitzt</i>.` keeps its full stop outside the tag."""

    def __init__(self, tokens: list[_Token], split: Splitter, escapes: dict[str, str]) -> None:
        self.tokens, self.events, self.escapes = tokens, [], escapes
        chars: list[str] = []
        self.raws: list[str] = []  # each plain character as written
        self.entities: dict[str, str] = {}  # character -> its entity
        closed = {token.element for token in tokens if token.kind == "end"}
        length = 0
        for token in tokens:
            if token.kind == "text":
                chars.append(token.value)
                length += len(token.value)
                self.raws += [token.raw] + [""] * (len(token.value) - 1) if token.entity else list(token.value)
                if token.entity and len(token.value) == 1:
                    self.entities[token.value] = token.raw
                continue
            role = "open" if token.kind == "start" and token.element in closed else \
                "close" if token.kind == "end" else "point"
            self.events.append(_Event(token, length, role))
        self.plain = "".join(chars)
        self.offsets: dict[int, list[int]] = {}  # element -> its tags' offsets
        for event in self.events:
            self.offsets.setdefault(event.token.element, []).append(event.offset)
        for event in self.events:
            space_before = event.offset == 0 or self.plain[event.offset - 1].isspace()
            space_after = event.offset == len(self.plain) or self.plain[event.offset].isspace()
            if event.role == "close" or event.role == "point" and space_after and not space_before:
                event.side = "before"
            elif event.role == "point" and space_before and space_after:
                event.side = "free"
        self.spans = [(s, e) for s, e in split(self.plain) if self.plain[s:e].strip()] if self.plain.strip() else []
        self.units = _units(self.plain)
        self.starts, self.ends = [u[0] for u in self.units], [u[1] for u in self.units]
        self.word_starts = [u[0] for n, u in enumerate(self.units) if n == 0 or self.units[n - 1][2] != u[2]]
        self.sentence_starts = [s for s, _ in self.spans]
        self.sentence_ends = [e for _, e in self.spans]

    def sentences(self) -> list[str]:
        return [self.plain[s:e] for s, e in self.spans]

    def render(self, results: Sequence[Aligned]) -> str:
        """The block's translation with its inline tags placed."""
        if not self.spans:
            return "".join(token.raw for token in self.tokens)
        targets = [_units(result.text) for result in results]
        links = [_links(result, len(result.text.split())) for result in results]
        keys = [self._place(event, targets, links) for event in self.events]
        for number in range(1, len(keys)):  # tags keep their order
            keys[number] = max(keys[number], keys[number - 1])
        at: dict[tuple[int, int], list[_Event]] = {}
        for event, key in zip(self.events, keys):
            at.setdefault(key, []).append(event)
        out, previous = [], 0
        for number, (start, end) in enumerate(self.spans):
            out.append(self._gap_text(previous, start, 2 * number, at))
            out.append(self._sentence_text(results[number].text, targets[number], 2 * number + 1, at))
            previous = end
        out.append(self._gap_text(previous, len(self.plain), 2 * len(self.spans), at))
        return "".join(out)

    def _place(self, event: _Event, targets: list[list[tuple[int, int, int, int]]],
               links: list[tuple[np.ndarray, list[int]] | None]) -> tuple[int, int]:
        """(2i, offset) in the whitespace before sentence i, or (2i + 1, b) at unit boundary b of sentence i."""
        gap = self._gap(event.offset)
        if gap is not None:
            return gap, event.offset
        first = event.role != "close"
        covered = range(0)
        if event.role != "point":
            low, high = sorted(self.offsets[event.token.element])
            covered = range(bisect.bisect_right(self.ends, low), bisect.bisect_left(self.starts, high))
        if not covered:  # a point or empty element: beside its unit
            following = bisect.bisect_left(self.starts, event.offset)
            if event.side == "before" or following == len(self.starts):
                covered, first = range(following - 1, following), False
            else:
                covered, first = range(following, following + 1), True
        sentence = self._sentence_of(self.starts[covered[0] if first else covered[-1]])
        first_word = bisect.bisect_left(self.word_starts, self.spans[sentence][0])
        start, end = self.spans[sentence]
        inside = range(max(covered.start, bisect.bisect_left(self.starts, start)),
                       min(covered.stop, bisect.bisect_left(self.starts, end)))
        source = (self.units[inside[0]][2] - first_word, self.units[inside[-1]][2] - first_word)
        kinds = {self.units[u][3] for u in inside} if len(inside) <= 6 else {0, 1, 2}
        return 2 * sentence + 1, _edge(links[sentence], targets[sentence], source, kinds, first)

    def _gap(self, offset: int) -> int | None:
        """The gap (2i: before sentence i) strictly holding `offset`, else None."""
        after = bisect.bisect_left(self.sentence_ends, offset)
        if after == len(self.spans):
            return 2 * after
        return 2 * after if offset < self.sentence_starts[after] else None

    def _sentence_of(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self.sentence_starts, offset) - 1)

    def _gap_text(self, start: int, end: int, gap: int, at: dict) -> str:
        """The whitespace from `start` to `end` with its tags."""
        out = []
        for offset in range(start, end + 1):
            out += [event.token.raw for event in at.pop((gap, offset), [])]
            if offset < end:
                out.append(self.raws[offset])
        return "".join(out)

    def _sentence_text(self, text: str, units: list[tuple[int, int, int, int]], key: int, at: dict) -> str:
        """A translated sentence with its tags."""
        out = []
        for boundary in range(len(units) + 1):
            events = at.pop((key, boundary), [])
            space = 0 < boundary < len(units) and units[boundary - 1][2] != units[boundary][2]
            before = 0
            while space and before < len(events) and events[before].side == "before":
                before += 1
            free = before  # markup between spaces gets a space of its own
            while space and free < len(events) and events[free].side == "free":
                free += 1
            out += [e.token.raw for e in events[:before]] + [" "] * space
            out += [e.token.raw + " " for e in events[before:free]] + [e.token.raw for e in events[free:]]
            if boundary < len(units):
                start, end = units[boundary][:2]
                out.append("".join(self.entities.get(c) or self.escapes.get(c, c) for c in text[start:end]))
        return "".join(out)


def _links(result: Aligned, target_words: int) -> tuple[np.ndarray, list[int]] | None:
    """The alignment and each target word's strongest source word, or None where unusable."""
    weights = result.weights
    if weights is None or weights.ndim != 2 or weights.shape[0] != target_words or 0 in weights.shape:
        return None
    return weights, np.argmax(weights, axis=1).tolist()


def _edge(links: tuple[np.ndarray, list[int]] | None, units: list[tuple[int, int, int, int]],
          source: tuple[int, int], kinds: set[int], first: bool) -> int:
    """The boundary before the first (or after the last) target unit, of `kinds`, aligned to the source word range
    `source`; the sentence's edge without an alignment."""
    if links is None:
        return 0 if first else len(units)
    weights, rows = links
    low, high = source
    words = {t for t, s in enumerate(rows) if low <= s <= high}
    words = words or {int(np.argmax(weights[:, s])) for s in range(low, min(high + 1, weights.shape[1]))}
    chosen = [u for u, (_, _, word, kind) in enumerate(units) if word in words and kind in kinds] or \
        [u for u, (_, _, word, _) in enumerate(units) if word in words]
    if not chosen:
        return 0 if first else len(units)
    return min(chosen) if first else max(chosen) + 1


def _units(text: str) -> list[tuple[int, int, int, int]]:
    """(start, end, word, kind) units: each word's leading punctuation (0), core (1), trailing punctuation (2)."""
    units, number, start = [], 0, None
    for position, char in enumerate(text + " "):
        if not char.isspace():
            if start is None:
                start = position
            continue
        if start is None:
            continue
        word = text[start:position]
        alnum = [i for i, c in enumerate(word) if c.isalnum()]
        if not alnum:
            units.append((start, position, number, 1))
        else:
            lead, trail = alnum[0], alnum[-1] + 1
            parts = ((0, lead, 0), (lead, trail, 1), (trail, len(word), 2))
            units += [(start + a, start + b, number, kind) for a, b, kind in parts if b > a]
        number, start = number + 1, None
    return units
