"""The one way from text to text: split into sentences, normalize, encode, truncate, batch by tokens, search,
detokenize, join; and the one loader of a model, whatever its form.

A `Translator` joins a tokenizer, a validated `DecodeConfig` and an engine (`nmt.engines`) that searches over
source ids. `load_translator` opens run folders, checkpoint files (decoded by the PyTorch engine, several as an
ensemble) or a CTranslate2 export folder. Validation, `nmt-evaluate`, `nmt-translate`, `nmt-serve`,
`nmt-compare` and the decoding benchmark all translate through it. Its methods are the user's API; the layer
under them, its `searcher` (a `Searcher`: `translations`, texts split into sentences by `nmt.sentences`, searched
and joined; `best` and `search`, lines searched whole, as evaluation needs; `encode`, `detokenize`), is for nmt's
own front ends (stream, serve, evaluation, compare, validation) and the benchmarks.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.checkpoint import LoadedModel, load_model
from nmt.config import Config, DecodeConfig, config_from_dict, decode_with
from nmt.data import normalize
from nmt.diagnostics import Thresholds, attention_stats, flags, row_classes
from nmt.engines import Engine
from nmt.engines.ctranslate2 import MANIFEST, NO_GLOSSARY, CTranslate2Engine, export_files, is_export, read_manifest
from nmt.engines.pytorch import TorchEngine
from nmt.errors import CheckpointError, ConfigError, DataError, ExportError, short_repr
from nmt.fileio import sha256_file
from nmt.glossary import GlossaryLike, line_terms
from nmt.markup import Aligned, splitter, translate_document, word_weights
from nmt.rundir import RunDir
from nmt.search import Ensemble, Hypothesis
from nmt.sentences import Pieces, split, split_mode
from nmt.tokenizer import UNK_ID, Tokenizer
from nmt.utils import resolve_device

ALIGNMENT_LAYER = -2  # the decoder layer whose cross-attention places inline tags (docs/translating.md says why)
Warn = Callable[[int, int], None]  # (index of the line, its subword count) of a truncated source


@dataclass(frozen=True)
class Member:
    """One model a translator decodes with, as the reports name it."""

    path: str
    sha256: str
    experiment: str
    arch: str
    steps: int | None = None  # training updates when the checkpoint was written
    minutes: float | None = None
    source_sha256: str = ""  # an export folder: the checkpoint it was converted from


@dataclass(frozen=True)
class ReferenceScore:
    """A reference translation's log-probability under the model (`Translator.score`)."""

    log_prob: float  # summed natural-log probability of its subwords and EOS
    tokens: int  # the subwords scored, EOS included

    @property
    def per_token(self) -> float:
        """The mean log-probability per scored subword (EOS included)."""
        return self.log_prob / self.tokens


@dataclass(frozen=True)
class Translation:
    """One translation of a text, an entry of its n-best list: the text with each sentence translated, whitespace
    and line breaks kept. A text of one sentence has its hypothesis's score and log-probability."""

    text: str
    score: float  # the sum of its sentences' scores (each Hypothesis.score, the length-penalized log-probability)
    log_prob: float  # the summed natural-log probability of every subword it holds and of each sentence's EOS
    tokens: int  # the subwords scored, each sentence's EOS included
    unmet: int = 0  # target terms its sentences lack (a constrained search that reached the length cap)
    hypotheses: tuple[Hypothesis | None, ...] = field(default=(), compare=False, repr=False)  # one per sentence

    @property
    def mean_log_prob(self) -> float:
        """The per-token average log-probability: over all its sentences' tokens, so a token-weighted mean; NaN
        for a translation of no tokens (a document with no text to translate)."""
        return self.log_prob / self.tokens if self.tokens else math.nan

    @property
    def confidence(self) -> float:
        """exp(mean_log_prob), in [0, 1]: the geometric mean of the model's probability for each token it chose.
        How sure the model was of its own words, not an estimate of the translation's quality."""
        return math.exp(self.mean_log_prob)

    def __iter__(self) -> Iterator[Any]:
        """`text, score = translation`: the (text, score) pair translate_nbest used to give; deprecated."""
        warnings.warn("unpacking a Translation as (text, score) is deprecated; read .text and .score",
                      DeprecationWarning, stacklevel=2)
        return iter((self.text, self.score))


class Searcher:
    """Lines in, hypotheses out: the layer under `Translator` that nmt's own front ends (stream, serve,
    evaluation, compare, validation) and the benchmarks call. It normalizes, encodes and truncates lines, searches
    them with the engine, detokenizes hypotheses, and joins sentences' n-best lists into texts'."""

    def __init__(self, engine: Engine, tokenizer: Tokenizer, decode: DecodeConfig, lowercase: bool,
                 members: Sequence[Member] = ()) -> None:
        self.engine, self.tokenizer, self.decode, self.lowercase = engine, tokenizer, decode, lowercase
        self.members = list(members)

    @property
    def model_name(self) -> str:
        """How errors name the model: its (first) member's path."""
        return self.members[0].path if self.members else "this model"

    def normalize(self, line: str) -> str:
        """The text the model reads: as the training data was cleaned (NFC, whitespace, optional lowercase)."""
        return normalize(line, self.lowercase)

    def translations(self, texts: Sequence[str], split_sentences: str | bool = "on", warn: Warn | None = None,
                     return_attention: bool = False, glossary: GlossaryLike = None,
                     constraints: Sequence[Sequence[str]] | None = None) -> list[list[Translation]]:
        """Each text's n-best list (`combine`): its sentences (`nmt.sentences.split` in mode `split_sentences`) are
        searched in one batch with every other text's; `warn` hears of truncated sentences by their text's index;
        `glossary` and `constraints` (one list per text) as `sentence_terms` assigns them. A text without subwords
        gives an empty list."""
        mode = split_mode(split_sentences)  # checked even for no texts
        pieces = [split(text, mode) for text in texts]
        owner = [index for index, piece in enumerate(pieces) for _ in piece.sentences]
        nbest = self.search(sentences_of(pieces), None if warn is None else lambda j, n: warn(owner[j], n),
                            return_attention, sentence_terms(pieces, glossary, constraints))
        return self.assemble(pieces, nbest)

    def assemble(self, pieces: Sequence[Pieces], nbest: Sequence[list[Hypothesis]]) -> list[list[Translation]]:
        """Each text's n-best list (`combine`) from the n-best lists of all their sentences, in order (`search`
        of `sentences_of(pieces)`)."""
        out, start = [], 0
        for piece in pieces:
            out.append(self.combine(piece, nbest[start:start + len(piece.sentences)]))
            start += len(piece.sentences)
        return out

    def combine(self, pieces: Pieces, nbest: Sequence[list[Hypothesis]]) -> list[Translation]:
        """A text's n-best list (decode.n_best entries at most, best first) from its sentences' n-best lists: the
        combinations of one hypothesis per sentence with the highest summed score. The first takes each
        sentence's best; each later one differs from an earlier one in a single sentence, which takes its next
        hypothesis. A sentence without subwords translates to ""; a text with none gives an empty list."""
        if not any(nbest):
            return []
        options = [hyps or [None] for hyps in nbest]

        def total(choice: tuple[int, ...]) -> float:
            return sum(hyp.score for opts, i in zip(options, choice) if (hyp := opts[i]) is not None)

        first = (0,) * len(options)
        heap, seen, out = [(-total(first), first)], {first}, []
        while heap and len(out) < self.decode.n_best:
            _, choice = heapq.heappop(heap)
            out.append(self._translation(pieces, [opts[i] for opts, i in zip(options, choice)]))
            for k, i in enumerate(choice):
                after = (*choice[:k], i + 1, *choice[k + 1:])
                if i + 1 < len(options[k]) and after not in seen:
                    seen.add(after)
                    heapq.heappush(heap, (-total(after), after))
        return out

    def _translation(self, pieces: Pieces, hyps: Sequence[Hypothesis | None]) -> Translation:
        found = [hyp for hyp in hyps if hyp is not None]
        return Translation(pieces.join([self.detokenize(hyp) if hyp is not None else "" for hyp in hyps]),
                           sum(hyp.score for hyp in found), sum(hyp.log_prob for hyp in found),
                           sum(len(hyp.tokens) + 1 for hyp in found), sum(hyp.unmet for hyp in found), tuple(hyps))

    def best(self, lines: Sequence[str], warn: Warn | None = None,
             terms: Sequence[Sequence[str]] | None = None) -> list[tuple[str, Hypothesis | None]]:
        """Each line's best translation, the line searched whole as one sentence (never split: what evaluation
        scores against aligned references), with its hypothesis (None for a line without subwords, whose
        translation is ""); `terms` as `search` takes them."""
        return [(self.detokenize(hyps[0]), hyps[0]) if hyps else ("", None)
                for hyps in self.search(lines, warn, terms=terms)]

    def search(self, lines: Sequence[str], warn: Warn | None = None, return_attention: bool = False,
               terms: Sequence[Sequence[str]] | None = None) -> list[list[Hypothesis]]:
        """The n-best list of each line, in input order; a line without subwords (blank, or only characters that
        normalization removes) gives an empty list. `terms`: per line, the target terms its translations must
        contain (`nmt.glossary.line_terms`), searched for by constrained beam search."""
        if terms is not None and not self.engine.abilities.constraints:
            raise ExportError(f"{self.model_name}: {NO_GLOSSARY}")
        work = [i for i, line in enumerate(lines) if line.strip()]
        sources = self.encode([lines[i] for i in work], None if warn is None else lambda j, n: warn(work[j], n))
        work, sources = [i for i, ids in zip(work, sources) if len(ids)], [ids for ids in sources if len(ids)]
        constraints = None if terms is None else [self.encode_terms(terms[i]) for i in work]
        continuations = self.tokenizer.tgt_word_continuations if terms is not None else frozenset()
        nbest = (self.engine.search(sources, self.decode, return_attention, constraints, continuations=continuations)
                 if work else [])
        results: list[list[Hypothesis]] = [[] for _ in lines]
        for i, hyps in zip(work, nbest, strict=True):
            results[i] = hyps
        return results

    def encode(self, lines: Sequence[str], warn: Warn | None = None) -> list[np.ndarray]:
        """Normalized, encoded and truncated source ids (no EOS); `warn` hears of each truncated line."""
        limit = self.decode.max_source_tokens
        out = []
        for index, ids in enumerate(self.tokenizer.encode_src([self.normalize(line) for line in lines])):
            if len(ids) > limit and warn is not None:
                warn(index, len(ids))
            out.append(np.asarray(ids[:limit], dtype=np.int64))
        return out

    def encode_terms(self, terms: Sequence[str]) -> list[np.ndarray]:
        """Target terms as the search reads them: normalized and encoded alone, so a term opens a word. A term the
        target vocabulary cannot write (its subwords hold the unknown piece) is a DataError naming it."""
        ids = self.tokenizer.encode_tgt([self.normalize(term) for term in terms]) if terms else []
        for term, pieces in zip(terms, ids):
            if UNK_ID in pieces:
                raise DataError(f"the target term {short_repr(term)} holds characters the model's target vocabulary "
                                "cannot write")
        return [np.asarray(term, dtype=np.int64) for term in ids if len(term)]

    def detokenize(self, hyp: Hypothesis) -> str:
        return self.tokenizer.decode_tgt(hyp.tokens)

    def attention_labels(self, line: str, hyp: Hypothesis) -> tuple[list[str], list[str]]:
        """The labels of `hyp`'s attention over `line`: its columns, the source subwords as the search read them
        (truncated) and EOS; its rows, the target subwords and EOS."""
        src = self.tokenizer.src_pieces(self.normalize(line))[:self.decode.max_source_tokens]
        return src + ["</s>"], self.tokenizer.tgt_id_pieces(hyp.tokens) + ["</s>"]

    def aligned(self, sentences: Sequence[str], layer: int | None = None, warn: Warn | None = None) -> list[Aligned]:
        """Each sentence's best translation with its word alignment: the cross-attention of decoder layer `layer`
        (default ALIGNMENT_LAYER; see `alignment_attention`), averaged over its heads (and an ensemble's members),
        summed from subwords into the whitespace-separated words of both sides; the search's own attention for a
        model without layers of heads (a GRU); none where the engine gives no attention. `warn` hears of truncated
        sentences."""
        attention = self.engine.abilities.attention
        out = []
        for sentence, hyps in zip(sentences, self.search(sentences, warn, return_attention=attention)):
            if not hyps:
                out.append(Aligned(""))
                continue
            best, text = hyps[0], self.detokenize(hyps[0])
            scores = {"score": best.score, "log_prob": best.log_prob, "tokens": len(best.tokens) + 1}
            if not attention:
                out.append(Aligned(text, **scores))
                continue
            layers = self.engine.layer_attention(self.encode([sentence])[0], list(best.tokens))
            weights = alignment_attention(layers, layer) if layers else best.attention.float()  # (T + 1, S + 1)
            src, tgt = self.attention_labels(sentence, best)
            out.append(Aligned(text, word_weights(src, tgt, weights.numpy(), len(sentence.split()),
                                                  len(text.split())), **scores))
        return out


class Translator:
    """Text in, text out, with one engine, one tokenizer and one validated decoding configuration."""

    def __init__(self, engine: Engine, tokenizer: Tokenizer, decode: DecodeConfig, lowercase: bool,
                 members: Sequence[Member] = (), cfg: Config | None = None) -> None:
        if engine.max_positions is not None and decode.max_source_tokens >= engine.max_positions:
            # a longer source (with its EOS) has no position encodings: truncate to what the model covers
            decode = dataclasses.replace(decode, max_source_tokens=engine.max_positions - 1)
        self.searcher = Searcher(engine, tokenizer, decode, lowercase, members)
        self.cfg = cfg  # the (first) member's training config: its dataset, experiment name, ...

    # what it searches with, kept once, by its searcher: read-only here
    engine = property(attrgetter("searcher.engine"), doc="The engine that searches.")
    tokenizer = property(attrgetter("searcher.tokenizer"), doc="The model's tokenizer.")
    decode = property(attrgetter("searcher.decode"), doc="The validated decoding settings.")
    lowercase = property(attrgetter("searcher.lowercase"), doc="Whether the model reads lowercased text.")
    members = property(attrgetter("searcher.members"), doc="The models it decodes with, as the reports name them.")

    def with_decode(self, decode: DecodeConfig | None = None, **changes: Any) -> Translator:
        """The same models and tokenizer with other search settings: `decode` in place of this one's, and/or
        decode.* settings changed by keyword (`beam=5`), checked as the config's are and against what the
        engine can do; itself when nothing changes."""
        if decode is None and not changes:
            return self
        decode = decode_with(decode or self.decode, changes)
        check_abilities(self.engine, decode)
        return Translator(self.engine, self.tokenizer, decode, self.lowercase, self.members, self.cfg)

    def normalize(self, line: str) -> str:
        """The text the model reads: as the training data was cleaned (NFC, whitespace, optional lowercase)."""
        return self.searcher.normalize(line)

    def translate(self, text: str | Sequence[str], warn: Warn | None = None, *, split_sentences: str | bool = "on",
                  glossary: GlossaryLike = None, constraints: Sequence[str] | Sequence[Sequence[str]] | None = None,
                  **decoding: Any) -> str | list[str]:
        """The best translation of a text (a str), or of each text of a sequence (a list; "" for a blank one).
        Each text is split into sentences (`split_sentences`: on, off or nonewlines, as `nmt.sentences.split`),
        translated in one batch and joined with the text's own whitespace. `glossary` (a `Glossary`, a {source
        term: target term} mapping, (source, target) pairs, or a TSV/CSV file's path) and `constraints` (the
        target terms of a str, or a list of them per text) name target terms the translations must contain
        (`sentence_terms`); `decoding` overrides decode.* settings (beam, length_penalty, ...) for this call; one
        batch gives what nmt-translate writes for the same lines."""
        lines, one = _lines(text)
        constraints = [constraints] if one and constraints is not None else constraints
        nbest = self.with_decode(**decoding).searcher.translations(lines, split_sentences, warn, glossary=glossary,
                                                                   constraints=constraints)
        out = [found[0].text if found else "" for found in nbest]
        return out[0] if one else out

    def translate_nbest(self, text: str | Sequence[str], n: int | None = None, *, split_sentences: str | bool = "on",
                        glossary: GlossaryLike = None,
                        constraints: Sequence[str] | Sequence[Sequence[str]] | None = None,
                        **decoding: Any) -> list[Translation] | list[list[Translation]]:
        """The n best translations (default: decode.n_best, at most the beam), best first, as `Translation`s (text,
        score, mean_log_prob, confidence): for a str one list, for a sequence one list per text (a text of several
        sentences: the combinations of one hypothesis per sentence with the highest summed score). The score is
        nmt-translate --scores': the summed log-probability (EOS included) over the GNMT length penalty, summed
        over the text's sentences. `glossary` and `constraints` as `translate` takes them."""
        lines, one = _lines(text)
        constraints = [constraints] if one and constraints is not None else constraints
        searcher = self.with_decode(**({"n_best": n} if n is not None else {}), **decoding).searcher
        out = searcher.translations(lines, split_sentences, glossary=glossary, constraints=constraints)
        return out[0] if one else out

    def score(self, sources: str | Sequence[str],
              references: str | Sequence[str]) -> ReferenceScore | list[ReferenceScore]:
        """How probable the model finds each reference translation of its source (forced decoding): a str pair
        gives one `ReferenceScore`, two sequences a list. The number is the model's own: the summed natural-log
        probability of the reference's subwords and EOS, read step by step as the search reads them (an
        ensemble: the mean of its members' log-probabilities, as in its search), with no length penalty and no
        length cap; for the search's output it is `Hypothesis.log_prob` (to float rounding). Both sides are
        normalized as the training data was, and the source truncated as for translation."""
        (src_lines, one), (ref_lines, _) = _lines(sources, "score"), _lines(references, "score")
        if isinstance(references, str) != one:
            raise ConfigError("score: give a str source with a str reference, or a sequence of each")
        if len(src_lines) != len(ref_lines):
            raise ConfigError(f"score: {len(src_lines)} sources but {len(ref_lines)} references; give one of each")
        if not self.engine.abilities.scores:
            raise ExportError(f"{self.searcher.model_name}: the {self.engine.name} "
                              "engine does not score given references; load a checkpoint or run folder")
        targets = [np.asarray(ids, dtype=np.int64)
                   for ids in self.tokenizer.encode_tgt([self.normalize(line) for line in ref_lines])]
        most = None if self.engine.max_positions is None else self.engine.max_positions - 1
        for index, ids in enumerate(targets):
            if most is not None and len(ids) > most:
                raise ConfigError(f"score: reference {index} has {len(ids)} subwords; the model reads at most {most}")
        token_log_probs = self.engine.score(self.searcher.encode(src_lines), targets, self.decode)
        out = [ReferenceScore(float(lp.sum()), len(lp)) for lp in token_log_probs]
        return out[0] if one else out

    def attention(self, sentence: str, thresholds: Thresholds | None = None, **decoding: Any) -> dict[str, Any]:
        """One sentence's best translation with its cross-attention: source and target subwords (each ending in
        EOS), the weights (rows: target subwords; columns: source subwords), every layer and head of a
        Transformer, and the attention diagnostics under `thresholds`: what nmt-serve's /attention gives."""
        if not isinstance(sentence, str):
            raise ConfigError(f"attention: expected one sentence (a str), got {type(sentence).__name__}")
        if not self.engine.abilities.attention:
            raise ExportError(f"{self.searcher.model_name}: an exported model gives "
                              "no attention weights; load a checkpoint or run folder")
        searcher, thresholds = self.with_decode(**decoding).searcher, thresholds or Thresholds()
        hyps = searcher.search([sentence], return_attention=True)[0]
        if not hyps:
            return {"translation": "", "src": [], "tgt": [], "attention": [], "layers": [], "diagnostics": None}
        best, src_ids = hyps[0], searcher.encode([sentence])[0]
        weights = best.attention.float()  # (T, S)
        stats = attention_stats(weights, thresholds, per_row=True)
        focused, uniform = row_classes(weights, thresholds)  # (T,) each
        stats["flags"] = flags(stats, thresholds)
        stats["row_flags"] = [[name for name, on in (("over-focused", f), ("near-uniform", u)) if on]
                              for f, u in zip(focused.tolist(), uniform.tolist())]
        layers = [{"name": name, "heads": [_rounded(head) for head in heads]}  # each head (T, S)
                  for name, heads in self.engine.layer_attention(src_ids, list(best.tokens))]
        src, tgt = searcher.attention_labels(sentence, best)
        return {"translation": searcher.detokenize(best), "score": round(best.score, 4), "src": src, "tgt": tgt,
                "attention": _rounded(weights), "layers": layers, "diagnostics": stats}

    def translate_markup(self, document: str, format: str = "html", *, ignore_tags: Collection[str] = (),
                         split_sentences: str | bool = "nonewlines", **decoding: Any) -> str:
        """A marked-up document (`format` "html" or "xml") translated with its markup as it was (`nmt.markup`):
        each block's text is split into sentences (`split_sentences`, as for `translate`; by default a line
        break is whitespace, as in markup) and translated, and inline tags inside a sentence are placed by the
        word alignment of `Searcher.aligned`; an engine without attention (a CTranslate2 export) puts them at their
        sentence's edges. Text in code, pre, translate="no" elements and elements named in `ignore_tags` is left
        alone. `decoding` as for `translate`; a document that cannot be read is a `MarkupError`."""
        return self.translate_markup_scored(document, format, ignore_tags=ignore_tags,
                                            split_sentences=split_sentences, **decoding).text

    def translate_markup_scored(self, document: str, format: str = "html", *, ignore_tags: Collection[str] = (),
                                split_sentences: str | bool = "nonewlines", warn: Warn | None = None,
                                **decoding: Any) -> Translation:
        """`translate_markup`'s document as a `Translation`: its score, log-probability and tokens are the sums
        over every sentence it translated, so its confidence is the token-weighted mean over them (text left alone
        is not scored; a document with no text to translate has 0 tokens and a NaN confidence). `warn` hears of
        truncated sentences by their number in the document."""
        aligner, done = self.with_decode(**decoding).searcher.aligned, []

        def translate(sentences: list[str]) -> list[Aligned]:
            results = aligner(sentences, warn=warn)
            done.extend(results)
            return results

        text = translate_document(document, format, translate, ignore_tags=ignore_tags,
                                  split=splitter(split_mode(split_sentences)))
        return Translation(text, sum(a.score for a in done), sum(a.log_prob for a in done),
                           sum(a.tokens for a in done))

    def settings(self) -> dict[str, Any]:
        """Everything that decides the output, for reports: search settings (the length penalty as decoded, a
        number even where it is `auto`), engine, precision, models."""
        decode = dataclasses.asdict(self.decode) | {"length_penalty": self.decode.alpha}
        return {"decode": decode, "engine": self.engine.name,
                "precision": self.engine.precision, "lowercase": self.lowercase,
                "members": [dataclasses.asdict(m) for m in self.members]}


def sentences_of(pieces: Sequence[Pieces]) -> list[str]:
    """The sentences of split texts, in order: what one search translates for all of them."""
    return [sentence for piece in pieces for sentence in piece.sentences]


def sentence_terms(pieces: Sequence[Pieces], glossary: GlossaryLike = None,
                   constraints: Sequence[Sequence[str]] | None = None) -> list[list[str]] | None:
    """Per sentence of split texts, the target terms its translation must contain (`nmt.glossary.line_terms`):
    the glossary's entries are matched in each sentence; a text's own `constraints` (one list per text) go to its
    sentence, and a text that holds several sentences and constraints is refused (which sentence a term belongs
    to is not known: split it, or translate it whole with split_sentences off). None when neither is given."""
    if constraints is not None:
        line_terms([" ".join(piece.sentences) for piece in pieces], None, constraints)  # checked per text
        for number, (piece, terms) in enumerate(zip(pieces, constraints), 1):
            if terms and len(piece.sentences) > 1:
                raise DataError(f"constraints of text {number}: it holds {len(piece.sentences)} sentences; give "
                                "constraints for a text of one sentence, or translate it whole (split_sentences off)")
        constraints = [terms for piece, terms in zip(pieces, constraints) for _ in piece.sentences]
    return line_terms(sentences_of(pieces), glossary, constraints)


def alignment_attention(layers: Sequence[tuple[str, torch.Tensor]], layer: int | None = None) -> torch.Tensor:
    """The attention that aligns words, from `Engine.layer_attention`'s named layers: decoder layer `layer`
    (counted from 1; default ALIGNMENT_LAYER; negative from the last) of each model, averaged over heads and
    models; (T, S)."""
    by_model: dict[str, list[torch.Tensor]] = {}
    for name, heads in layers:
        by_model.setdefault(name.rpartition("layer")[0], []).append(heads)
    chosen = ALIGNMENT_LAYER if layer is None else layer
    picked = [stack[min(max(chosen - 1 if chosen > 0 else len(stack) + chosen, 0), len(stack) - 1)]
              for stack in by_model.values()]  # each (h, T, S); a model with fewer layers gives its nearest
    return torch.stack([heads.float().mean(0) for heads in picked]).mean(0)  # (T, S)


def _rounded(weights: torch.Tensor) -> list:
    return np.round(weights.float().numpy(), 4).tolist()


def _lines(text: str | Sequence[str], what: str = "translate") -> tuple[list[str], bool]:
    """The lines of a str or a sequence of them, and whether it was a single str."""
    if isinstance(text, str):
        return [text], True
    lines = list(text)
    if not all(isinstance(line, str) for line in lines):
        raise ConfigError(f"{what}: expected a str or a sequence of str")
    return lines, False


def member_of(loaded: LoadedModel) -> Member:
    progress = loaded.progress
    minutes = round(progress["elapsed"] / 60, 2) if "elapsed" in progress else None
    return Member(str(loaded.path), sha256_file(loaded.path), loaded.cfg.name, loaded.cfg.model.arch,
                  progress.get("step"), minutes)


def from_loaded(loaded: Sequence[LoadedModel], device: torch.device, precision: str = "fp32",
                decode: DecodeConfig | None = None) -> Translator:
    """A PyTorch translator over one model or an ensemble; `decode` defaults to the first model's settings.

    Ensemble members must share the tokenizer (and so both vocabularies and the segmentation).
    """
    first = loaded[0]
    for other in loaded[1:]:
        if other.tokenizer.identity != first.tokenizer.identity:
            raise CheckpointError(f"{other.path}: its vocabulary differs from {first.path}'s; ensemble members "
                                  "must share the tokenizer")
        if other.cfg.data.lowercase != first.cfg.data.lowercase:
            raise CheckpointError(f"{other.path}: data.lowercase differs from {first.path}'s; ensemble members "
                                  "must read the same normalized text")
    model = first.model if len(loaded) == 1 else Ensemble([item.model for item in loaded]).to(device)
    return Translator(TorchEngine(model, device, precision), first.tokenizer, decode or first.cfg.decode,
                      first.cfg.data.lowercase, [member_of(item) for item in loaded], first.cfg)


def from_export(folder: str | Path, device: torch.device, precision: str = "fp32") -> Translator:
    """A translator decoding with CTranslate2 from a checked export folder, with the run's decoding settings."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if precision != "fp32":
        raise ExportError(f"{folder}: an export decodes at the quantization it was exported with "
                          f"({manifest['quantization']}); --precision applies to checkpoints only")
    cfg = config_from_dict(manifest["config"])
    tokenizer = Tokenizer.load(folder)
    engine = CTranslate2Engine(folder, manifest["quantization"], device, cfg.model.max_positions)
    member = Member(str(folder), manifest["files"]["model.bin"], cfg.name, cfg.model.arch,
                    source_sha256=manifest["source_sha256"])
    return Translator(engine, tokenizer, cfg.decode, cfg.data.lowercase, [member], cfg)


def model_inputs(path: str | Path) -> list[tuple[str, Path]]:
    """The files the loader reads of a model, named for path checks: the checkpoint given, each one a run folder
    may resolve to, or an export folder's files (reports written into the folder are not inputs)."""
    given = Path(path)
    if is_export(given):
        return [("exported model", p) for p in export_files(given)] + [("export manifest", given / MANIFEST)]
    if given.is_dir():
        return [("checkpoint", p) for p in RunDir(given).finals()]
    return [("checkpoint", given)]


def load_translator(paths: str | Path | Sequence[str | Path], device: str | torch.device = "auto",
                    precision: str = "fp32", changes: dict[str, Any] | None = None,
                    label: Callable[[str], str] = lambda key: f"decode.{key}") -> Translator:
    """A translator for run folders, checkpoint files (several: an ensemble) or one CTranslate2 export folder.

    `device` is a name (auto, cpu, cuda, cuda:N) or a torch.device. `changes` (None values ignored) override
    the decoding settings stored with the model; the result is validated, with `label` naming the offending
    setting (a config key or a command-line flag), and checked against what the engine can do.
    """
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths or not all(isinstance(p, (str, Path)) for p in paths):
        raise CheckpointError("give a model: a run folder, checkpoint file or export folder (a str or Path)")
    device = resolve_device(device)
    exports = [p for p in paths if is_export(p)]
    if exports and len(paths) > 1:
        raise CheckpointError(f"{exports[0]}: an exported model cannot be part of an ensemble")
    kind = CTranslate2Engine if exports else TorchEngine
    if device.type not in kind.abilities.devices:
        raise ConfigError(f"device {device.type}: the {kind.name} engine decodes on "
                          f"{' or '.join(kind.abilities.devices)} only")
    if exports:
        translator = from_export(paths[0], device, precision)
    else:
        translator = from_loaded([load_model(p, device) for p in paths], device, precision)
    decode = decode_with(translator.decode, changes or {}, label)
    check_abilities(translator.engine, decode, label)
    return translator.with_decode(decode)


def check_abilities(engine: Engine, decode: DecodeConfig,
                    label: Callable[[str], str] = lambda key: f"decode.{key}") -> None:
    """Refuse decoding settings the engine cannot search with."""
    abilities = engine.abilities
    if decode.beam > 1 and decode.stop not in abilities.stops:
        raise ConfigError(f"{label('stop')} {decode.stop}: the {engine.name} engine stops a sentence only "
                          f"by {', '.join(abilities.stops)}; decode a checkpoint for this rule")
    if decode.n_best > 1 and not abilities.n_best:
        raise ConfigError(f"{label('n_best')} {decode.n_best}: the {engine.name} engine gives one translation "
                          "per sentence")
