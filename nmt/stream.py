"""Translation of files: text streamed line by line, marked-up documents whole; output written atomically."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import ExitStack, nullcontext
from itertools import islice
from pathlib import Path
from typing import IO, Any, BinaryIO

from nmt.diagnostics import Thresholds, attention_stats, flags
from nmt.engines.pytorch import batch_seed
from nmt.errors import DataError, FileError, MarkupError
from nmt.fileio import atomic_output, check_input, check_output
from nmt.glossary import Glossary, check_targets, constraint_terms
from nmt.loader import model_inputs
from nmt.markup import BOM, MAX_DOCUMENT_CHARS
from nmt.partial import PartialOutputs
from nmt.sentences import one_line, split, split_mode
from nmt.translator import Translation, Translator

DECLARED_ENCODING = re.compile(r"<\?xml\s[^>]*?\bencoding\s*=\s*([\"'])(?P<name>[^\"']*)\1")
UTF8_NAMES = ("utf-8", "utf8", "us-ascii", "ascii")


class Stream:
    """Translates lines chunk by chunk with a `Translator`, writing text, scores, n-best lists and diagnostics.

    Output: a translation per line (with `scores`: tab-separated score, mean log-probability, confidence); with
    n-best > 1, Moses lines `index ||| text ||| score` (with `scores`: `||| mean_log_prob confidence`).
    """

    def __init__(self, translator: Translator, chunk_lines: int = 2000, scores: bool = False,
                 plot_dir: str | None = None, plot_count: int = 10, stats_path: str | None = None,
                 thresholds: Thresholds | None = None, split_sentences: str = "on",
                 glossary: Glossary | None = None) -> None:
        self.translator, self.chunk_lines, self.scores = translator, chunk_lines, scores
        self.glossary = glossary
        if glossary is not None:
            check_targets(glossary, translator.encode_terms)
        self.plot_dir = Path(plot_dir) if plot_dir else None
        self.plot_count, self.stats_path = plot_count, stats_path
        self.thresholds = thresholds or Thresholds()
        self.split_sentences = split_mode(split_sentences)
        self.plotted = 0

    def translate_chunk(self, numbered: list[tuple[int, str]], name: str = "<input>",
                        constraints: list[list[str]] | None = None) -> list[list[Translation]]:
        """N-best lists for (line number, text) pairs; `constraints`: per line, target terms besides the glossary's."""
        limit = self.translator.decode.max_source_tokens

        def warn(index: int, length: int) -> None:
            print(f"warning: {name} line {numbered[index][0]}: {length} subwords, truncated to {limit}",
                  file=sys.stderr)

        want_attention = self.stats_path is not None or (self.plot_dir is not None and self.plotted < self.plot_count)
        translator = self.translator
        if translator.decode.sampling:  # seeded by the chunk's place, so a resumed run draws as a whole one would
            translator = translator.with_decode(seed=batch_seed(translator.decode.seed, numbered[0][0]) >> 1)  # 31 bits
        texts = translator.prepare([line for _, line in numbered], self.split_sentences, glossary=self.glossary,
                                   constraints=constraints)
        results = translator.translations(texts, warn, want_attention)
        for (number, _), found in zip(numbered, results, strict=True):
            if found and found[0].unmet:
                print(f"warning: {name} line {number}: the translation lacks {found[0].unmet} of its target terms "
                      "(it reached the length cap first)", file=sys.stderr)
        return results

    def _format(self, index: int, found: list[Translation]) -> list[str]:
        """The output lines of one input line, its inner line breaks written as spaces."""
        if self.translator.decode.n_best > 1:
            return [f"{index} ||| {one_line(t.text)} ||| {t.score:.4f}"
                    + (f" ||| {t.mean_log_prob:.4f} {t.confidence:.4f}" if self.scores else "") for t in found]
        if not found:
            return [""]
        best = found[0]
        return [f"{one_line(best.text)}\t{best.score:.4f}\t{best.mean_log_prob:.4f}\t{best.confidence:.4f}"
                if self.scores else one_line(best.text)]

    def _diagnose(self, numbered: list[tuple[int, str]], results: list[list[Translation]],
                  stats_handle: IO | None) -> None:
        """Attention statistics and plots of each sentence of each line's best translation."""
        if stats_handle is None and (self.plot_dir is None or self.plotted >= self.plot_count):
            return
        for (line_number, line), found in zip(numbered, results):
            if not found:
                continue
            sentences = split(line, self.split_sentences, language=self.translator.languages[0]).sentences
            for number, (sentence, hyp) in enumerate(zip(sentences, found[0].hypotheses), 1):
                if hyp is None or hyp.attention is None:
                    continue
                weights = hyp.attention.float()  # (T, S)
                if stats_handle is not None:
                    stats = attention_stats(weights, self.thresholds, per_row=True)
                    record = {"line": line_number, "sentence": number, **stats,
                              "flags": flags(stats, self.thresholds)}
                    stats_handle.write(json.dumps(record) + "\n")
                if self.plot_dir is not None and self.plotted < self.plot_count:
                    from nmt.plots import attention_heatmap  # matplotlib is slow to import

                    src, tgt = self.translator.attention_labels(sentence, hyp)
                    suffix = "" if len(sentences) == 1 else f"_{number}"
                    attention_heatmap(weights.numpy(), src, tgt, self.plot_dir / f"line{line_number:05d}{suffix}.png",
                                      title=self.translator.detokenize(hyp))
                    self.plotted += 1

    def run(self, lines: Iterable[str], name: str, output: str | None,
            constraints: Iterable[list[str]] | None = None) -> int:
        """Translate every line to `output` or stdout, with each line's `constraints`; returns the line count.

        A file output is resumable: it grows in OUTPUT.partial (the statistics file beside it likewise), and a
        rerun of a stopped run with the same model, settings and input goes on after its last finished chunk."""
        terms = None if constraints is None else iter(constraints)
        if output is None:
            with atomic_output(self.stats_path) if self.stats_path else nullcontext(None) as stats_handle:
                return self._stream(lines, name, terms, None, lambda: (sys.stdout, stats_handle))
        partial = PartialOutputs([output, *([self.stats_path] if self.stats_path else [])], self._key())
        if partial.stale:
            print(f"note: {partial.partials[0]} was written by another model, settings or input; starting over",
                  file=sys.stderr)
        try:
            count = self._stream(lines, name, terms, partial, lambda: _pair(partial.open()))
            partial.finish()
        except BaseException:
            if partial.abandon():
                lines = f"{partial.lines:,} line{'s' if partial.lines != 1 else ''}"
                print(f"note: the translations of {lines} are kept in {partial.partials[0]}; the same command "
                      "goes on from there", file=sys.stderr)
            raise
        return count

    def _stream(self, lines: Iterable[str], name: str, terms: Iterator[list[str]] | None,
                partial: PartialOutputs | None, outputs: Callable[[], tuple[IO[str], IO[str] | None]]) -> int:
        """Translate chunk by chunk to `outputs()` (the text output, the statistics or None), skipping the chunks
        `partial` has finished on the same lines; returns the line count."""
        count, resumed = 0, False
        for numbered in _chunks(enumerate(lines, 1), self.chunk_lines):
            chunk_terms = None if terms is None else list(islice(terms, len(numbered)))
            if chunk_terms is not None and len(chunk_terms) < len(numbered):
                raise DataError(f"--constraints: fewer lines than {name} ({count + len(chunk_terms)})")
            read = [line for _, line in numbered] + ["\t".join(t) for t in chunk_terms or ()]
            count += len(numbered)
            if partial is not None and (record := partial.finished(read)) is not None:
                self.plotted, resumed = record["plotted"], True
                continue
            if resumed:
                print(f"resuming at line {numbered[0][0]:,}: the lines before it are in {partial.partials[0]}",
                      file=sys.stderr)
                resumed = False
            out, stats_handle = outputs()
            results = self.translate_chunk(numbered, name, chunk_terms)
            for (number, _), found in zip(numbered, results):
                out.writelines(text + "\n" for text in self._format(number - 1, found))
            self._diagnose(numbered, results, stats_handle)
            if partial is None:
                out.flush()
            else:
                partial.commit(read, len(numbered), plotted=self.plotted)
        if terms is not None and next(terms, None) is not None:
            if partial is not None:  # the two files do not belong together: nothing to go on from
                partial.discard()
            raise DataError(f"--constraints: more lines than {name} ({count})")
        return count

    def _key(self) -> dict[str, Any]:
        """What decides the output besides the input lines: the models (by sha256) and every setting."""
        settings = self.translator.settings()
        settings["members"] = [m["sha256"] for m in settings["members"]]
        return {"translator": settings, "chunk_lines": self.chunk_lines, "scores": self.scores,
                "split_sentences": self.split_sentences, "glossary": self.glossary and self.glossary.entries,
                "stats": self.stats_path is not None and dataclasses.asdict(self.thresholds),
                "plots": self.plot_dir is not None and [str(self.plot_dir.resolve()), self.plot_count]}


def _pair(handles: list[IO[str]]) -> tuple[IO[str], IO[str] | None]:
    """The text output and the statistics file (None without one)."""
    return handles[0], handles[1] if len(handles) > 1 else None


def _chunks(items: Iterator[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    while chunk := list(islice(items, size)):
        yield chunk


def read_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines of a binary stream as text; DataError at invalid UTF-8."""
    for line_number, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise DataError(f"{name}: line {line_number} is not valid UTF-8") from None


def check_paths(models: list[str], source: str | None, output: str | None, stats: str | None,
                plots: str | None, glossary: str | None = None, constraints: str | None = None) -> None:
    """Check nmt-translate's inputs and outputs (distinct, standard streams open) before a model is loaded."""
    inputs = [item for path in models for item in model_inputs(path)]
    for flag, path in (("-i/--input", source), ("--glossary", glossary), ("--constraints", constraints)):
        if path:
            inputs.append((flag, check_input(flag, path)))
    if output:
        check_output("-o/--output", output, inputs)
    if stats:
        check_output("--attention-stats", stats, [*inputs, ("-o/--output", output)])
    if plots:
        check_output("--attention-plots", plots, [*inputs, ("-o/--output", output), ("--attention-stats", stats)],
                     folder=True)
    if not source and sys.stdin is None:
        raise DataError("<stdin>: standard input is closed; give -i/--input FILE")
    if not output and sys.stdout is None:
        raise FileError("<stdout>: standard output is closed; give -o/--output FILE")


def translate_file(stream: Stream, source: str | None, output: str | None, constraints: str | None = None) -> int:
    """Translate `source` (None: stdin) to `output` (None: stdout) with the file `constraints` (tab-separated
    terms per line); returns the line count."""
    name = source or "<stdin>"
    with ExitStack() as stack:
        terms = None
        if constraints:
            lines = read_lines(_open(stack, constraints, "constraints"), constraints)
            terms = (_spelled(stream, constraint_terms(line, f"{constraints} line {number}"),
                              f"{constraints} line {number}") for number, line in enumerate(lines, 1))
        handle = _open(stack, source, "input") if source else sys.stdin.buffer
        return stream.run(read_lines(handle, name), name, output, terms)


def _spelled(stream: Stream, terms: list[str], where: str) -> list[str]:
    """`terms`, once the model's vocabulary can write each."""
    try:
        stream.translator.encode_terms(terms)
    except DataError as err:
        raise DataError(f"{where}: {err}") from None
    return terms


def _open(stack: ExitStack, path: str, what: str) -> BinaryIO:
    """`path` opened in binary, closed with `stack`; DataError if it cannot be."""
    try:
        return stack.enter_context(open(path, "rb"))
    except OSError as err:
        raise DataError(f"{path}: cannot open {what} ({err.strerror})") from None


def translate_document_file(translator: Translator, format: str, source: str | None, output: str | None, *,
                            split_sentences: str = "nonewlines", ignore_tags: Collection[str] = ()) -> None:
    """Translate the HTML or XML document `source` (None: stdin) to `output` (None: stdout), its markup kept.

    DataError for a file not in UTF-8, MarkupError for one unreadable or over MAX_DOCUMENT_CHARS; nothing is
    written then."""
    name = source or "<stdin>"
    with ExitStack() as stack:  # the longest document (in UTF-8) and one byte

        data = (_open(stack, source, "input") if source else sys.stdin.buffer).read(4 * MAX_DOCUMENT_CHARS + 1)
    try:
        document = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        if len(data) > 4 * MAX_DOCUMENT_CHARS:
            raise MarkupError(f"{name}: longer than {MAX_DOCUMENT_CHARS:,} characters, the most a document may "
                              "hold (split it into smaller documents)") from None
        raise DataError(f"{name}: line {line} is not valid UTF-8") from None
    declared = DECLARED_ENCODING.match(document.removeprefix(BOM)) if format == "xml" else None
    if declared and declared["name"].lower().replace("_", "-") not in UTF8_NAMES:
        raise DataError(f"{name}: the XML declaration names the encoding {declared['name']!r}; nmt-translate reads "
                        "and writes UTF-8: convert the file and its declaration (iconv -t UTF-8)")
    limit = translator.decode.max_source_tokens

    def warn(index: int, length: int) -> None:
        print(f"warning: {name} sentence {index + 1}: {length} subwords, truncated to {limit}", file=sys.stderr)

    try:
        translated = translator.translate_markup_scored(document, format, ignore_tags=ignore_tags,
                                                        split_sentences=split_sentences, warn=warn).text
    except MarkupError as err:
        raise MarkupError(f"{name}: {err}") from None
    encoded = translated.encode("utf-8")
    if output:
        with atomic_output(output, "wb") as out:
            out.write(encoded)
    else:
        sys.stdout.buffer.write(encoded)
        sys.stdout.flush()
