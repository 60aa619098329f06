"""The Translator: text to text through one engine, and the ids-level calls under it (built by `nmt.loader`)."""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nmt.config import Config, DataConfig, DecodeConfig, decode_with
from nmt.data import normalize
from nmt.diagnostics import Thresholds, attention_stats, flags, row_classes
from nmt.engines import Engine
from nmt.engines.ctranslate2 import NO_GLOSSARY
from nmt.errors import ConfigError, DataError, ExportError, short_repr
from nmt.glossary import GlossaryLike, line_terms
from nmt.markup import Aligned, splitter, translate_document, word_weights
from nmt.search import Hypothesis
from nmt.sentences import Pieces, split, split_mode
from nmt.tokenizer import UNK_ID, Tokenizer

ALIGNMENT_LAYER = -2  # the decoder layer whose cross-attention places inline tags
Warn = Callable[[int, int], None]  # (line index, subwords) of a truncated source


@dataclass(frozen=True)
class Member:
    """One model a translator decodes with, as reports name it."""

    path: str
    sha256: str
    experiment: str
    arch: str
    steps: int | None = None  # training updates when the checkpoint was written
    minutes: float | None = None
    source_sha256: str = ""  # an export folder's source checkpoint


@dataclass(frozen=True)
class ReferenceScore:
    """A reference translation's log-probability under the model (`Translator.score`)."""

    log_prob: float  # summed over its subwords and EOS
    tokens: int  # EOS included

    @property
    def per_token(self) -> float:
        """Mean log-probability per scored subword."""
        return self.log_prob / self.tokens


@dataclass(frozen=True)
class Translation:
    """One entry of a text's n-best list, the text's whitespace kept."""

    text: str
    score: float  # sum of its sentences' Hypothesis.score
    log_prob: float
    tokens: int  # each sentence's EOS included
    unmet: int = 0  # target terms it lacks
    hypotheses: tuple[Hypothesis | None, ...] = field(default=(), compare=False, repr=False)  # one per sentence

    @property
    def mean_log_prob(self) -> float:
        """Mean log-probability per token; NaN without tokens."""
        return self.log_prob / self.tokens if self.tokens else math.nan

    @property
    def confidence(self) -> float:
        """exp(mean_log_prob): how sure the model was, not an estimate of quality."""
        return math.exp(self.mean_log_prob)


@dataclass(frozen=True)
class Texts:
    """Texts split into sentences, with each sentence's target terms (or None)."""

    pieces: tuple[Pieces, ...]
    terms: list[list[str]] | None = None

    @property
    def sentences(self) -> list[str]:
        return [sentence for piece in self.pieces for sentence in piece.sentences]

    def owners(self) -> list[int]:
        """Each sentence's text index."""
        return [index for index, piece in enumerate(self.pieces) for _ in piece.sentences]

    @staticmethod
    def joined(parts: Sequence[Texts]) -> Texts:
        """Several as one, for one search; all with terms or all without."""
        terms = None if parts[0].terms is None else [terms for part in parts for terms in part.terms or []]
        return Texts(tuple(piece for part in parts for piece in part.pieces), terms)


class Translator:
    """Text in, text out, with one engine, tokenizer and decoding configuration."""

    def __init__(self, engine: Engine, tokenizer: Tokenizer, decode: DecodeConfig, lowercase: bool,
                 members: Sequence[Member] = (), cfg: Config | None = None) -> None:
        if engine.max_positions is not None and decode.max_source_tokens >= engine.max_positions:
            # a longer source (with its EOS) has no position encodings
            decode = dataclasses.replace(decode, max_source_tokens=engine.max_positions - 1)
        self.engine, self.tokenizer, self.decode, self.lowercase = engine, tokenizer, decode, lowercase
        self.members = list(members)
        self.cfg = cfg  # first member's training config
        self.languages = (cfg.data if cfg is not None else DataConfig()).languages  # (source, target)

    def with_decode(self, decode: DecodeConfig | None = None, **changes: Any) -> Translator:
        """The same models with other search settings (`decode` and/or decode.* keywords such as `beam=5`), checked."""
        if decode is None and not changes:
            return self
        decode = decode_with(decode or self.decode, changes)
        check_abilities(self.engine, decode)
        return Translator(self.engine, self.tokenizer, decode, self.lowercase, self.members, self.cfg)

    def normalize(self, line: str) -> str:
        """The text the model reads, cleaned as in training."""
        return normalize(line, self.lowercase)

    def translate(self, text: str | Sequence[str], warn: Warn | None = None, *, split_sentences: str | bool = "on",
                  glossary: GlossaryLike = None, constraints: Sequence[str] | Sequence[Sequence[str]] | None = None,
                  **decoding: Any) -> str | list[str]:
        """The best translation of a str, or of each text of a sequence ("" for a blank one).

        `glossary` (a `Glossary`, mapping, pairs or TSV/CSV path) and `constraints` (per text) name terms the output
        must contain; `decoding` overrides decode.* settings; `warn` hears (text index, subwords) of truncations.

        """
        lines, one = _lines(text)
        constraints = [constraints] if one and constraints is not None else constraints
        texts = self.prepare(lines, split_sentences, glossary=glossary, constraints=constraints)
        nbest = self.with_decode(**decoding).translations(texts, warn)
        out = [found[0].text if found else "" for found in nbest]
        return out[0] if one else out

    def translate_nbest(self, text: str | Sequence[str], n: int | None = None, *, split_sentences: str | bool = "on",
                        glossary: GlossaryLike = None,
                        constraints: Sequence[str] | Sequence[Sequence[str]] | None = None,
                        **decoding: Any) -> list[Translation] | list[list[Translation]]:
        """The n best `Translation`s (default decode.n_best), best first: a list for a str, one per text for a
        sequence. Arguments as `translate`'s."""
        lines, one = _lines(text)
        constraints = [constraints] if one and constraints is not None else constraints
        texts = self.prepare(lines, split_sentences, glossary=glossary, constraints=constraints)
        out = self.with_decode(**({"n_best": n} if n is not None else {}), **decoding).translations(texts)
        return out[0] if one else out

    def prepare(self, texts: Sequence[str], split_sentences: str | bool = "on", *, glossary: GlossaryLike = None,
                constraints: Sequence[Sequence[str]] | None = None) -> Texts:
        """`translate`'s first half: texts split, with target terms; `DataError` for a bad glossary or constraint."""
        mode = split_mode(split_sentences)
        pieces = tuple(split(text, mode, language=self.languages[0]) for text in texts)
        return Texts(pieces, sentence_terms(pieces, glossary, constraints))

    def translations(self, texts: Texts, warn: Warn | None = None,
                     return_attention: bool = False) -> list[list[Translation]]:
        """`translate`'s second half: all sentences searched in one batch; each text's n-best list."""
        owner, constraints = texts.owners(), self._constraints(texts.terms)
        sources = self.encode(texts.sentences, None if warn is None else lambda j, n: warn(owner[j], n))
        nbest = self.engine.search(sources, self.decode, return_attention, **constraints)
        out, start = [], 0
        for piece in texts.pieces:
            out.append(self._combine(piece, nbest[start:start + len(piece.sentences)]))
            start += len(piece.sentences)
        return out

    def _combine(self, pieces: Pieces, nbest: Sequence[list[Hypothesis]]) -> list[Translation]:
        """A text's n-best list: combinations of one hypothesis per sentence with the highest summed score."""
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

    def hypotheses(self, lines: Sequence[str], *, terms: Sequence[Sequence[str]] | None = None,
                   warn: Warn | None = None, return_attention: bool = False) -> list[list[Hypothesis]]:
        """Each line's n-best hypotheses, the line searched whole; `terms`: per line, target terms to contain."""
        constraints = self._constraints(terms)
        return self.engine.search(self.encode(lines, warn), self.decode, return_attention, **constraints)

    def encode(self, lines: Sequence[str], warn: Warn | None = None) -> list[np.ndarray]:
        """Normalized, encoded and truncated source ids (no EOS); none for a blank line."""
        limit = self.decode.max_source_tokens
        out = []
        for index, ids in enumerate(self.tokenizer.encode_src([self.normalize(line) if line.strip() else ""
                                                               for line in lines])):
            if len(ids) > limit and warn is not None:
                warn(index, len(ids))
            out.append(np.asarray(ids[:limit], dtype=np.int64))
        return out

    def search_batch(self, sources: Sequence[Sequence[int]], *, terms: Sequence[Sequence[Sequence[int]]] | None = None,
                     return_attention: bool = False) -> list[list[Hypothesis]]:
        """Each source's n-best hypotheses (ids without EOS); `terms` per source, as target ids, each a whole word."""
        constraints = self._constraints(terms, encoded=True)
        return self.engine.search([np.asarray(ids, dtype=np.int64) for ids in sources], self.decode, return_attention,
                                  **constraints)

    def encode_terms(self, terms: Sequence[str]) -> list[np.ndarray]:
        """Target terms as search reads them, each encoded alone so it opens a word; DataError for one that
        encodes to the unknown piece."""
        ids = self.tokenizer.encode_tgt([self.normalize(term) for term in terms]) if terms else []
        for term, pieces in zip(terms, ids):
            if UNK_ID in pieces:
                raise DataError(f"the target term {short_repr(term)} holds characters the model's target vocabulary "
                                "cannot write")
        return [np.asarray(term, dtype=np.int64) for term in ids if len(term)]

    def _constraints(self, terms: Sequence[Sequence[Any]] | None, encoded: bool = False) -> dict[str, Any]:
        """The engine's keyword arguments: ids never emitted and per-line target terms (text, or ids if `encoded`)."""
        if terms is not None and not self.engine.abilities.constraints:
            raise ExportError(f"{self._name()}: {NO_GLOSSARY}")
        if terms is not None and self.decode.sampling:
            raise ConfigError("decode.sampling: a glossary or constraints need beam search; turn sampling off")
        never_emit = {"never_emit": self.tokenizer.never_emit}
        if terms is None:
            return never_emit
        ids = ([[np.asarray(term, dtype=np.int64) for term in line] for line in terms] if encoded
               else [self.encode_terms(line) for line in terms])
        return {"constraints": ids, "continuations": self.tokenizer.tgt_word_continuations, **never_emit}

    def _name(self) -> str:
        """How errors name the model."""
        return self.members[0].path if self.members else "this model"

    def detokenize(self, hyp: Hypothesis) -> str:
        """A hypothesis's text."""
        return self.tokenizer.detokenize(hyp.tokens)

    def attention_labels(self, line: str, hyp: Hypothesis) -> tuple[list[str], list[str]]:
        """Source and target subword labels of `hyp`'s attention, each ending in EOS."""
        src = self.tokenizer.src_pieces(self.normalize(line))[:self.decode.max_source_tokens]
        return src + ["</s>"], self.tokenizer.tgt_id_pieces(hyp.tokens) + ["</s>"]

    def aligned(self, sentences: Sequence[str], layer: int | None = None, warn: Warn | None = None) -> list[Aligned]:
        """Each sentence's best translation with its word alignment from decoder layer `layer`'s cross-attention
        (default ALIGNMENT_LAYER); none where the engine gives no attention."""
        attention = self.engine.abilities.attention
        out = []
        for sentence, hyps in zip(sentences, self.hypotheses(sentences, warn=warn, return_attention=attention)):
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

    def score(self, sources: str | Sequence[str],
              references: str | Sequence[str]) -> ReferenceScore | list[ReferenceScore]:
        """Each reference's log-probability given its source (forced decoding, no length penalty): a
        `ReferenceScore` for a str pair, a list for two sequences."""
        (src_lines, one), (ref_lines, _) = _lines(sources, "score"), _lines(references, "score")
        if isinstance(references, str) != one:
            raise ConfigError("score: give a str source with a str reference, or a sequence of each")
        if len(src_lines) != len(ref_lines):
            raise ConfigError(f"score: {len(src_lines)} sources but {len(ref_lines)} references; give one of each")
        targets = self.tokenizer.encode_tgt([self.normalize(line) for line in ref_lines])
        token_log_probs = self.score_batch(self.encode(src_lines), targets)
        out = [ReferenceScore(float(lp.sum()), len(lp)) for lp in token_log_probs]
        return out[0] if one else out

    def score_batch(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Each target's token log-probabilities given its source, EOS last (ids without BOS or EOS)."""
        if not self.engine.abilities.scores:
            raise ExportError(f"{self._name()}: the {self.engine.name} "
                              "engine does not score given references; load a checkpoint or run folder")
        targets = [np.asarray(ids, dtype=np.int64) for ids in targets]
        most = None if self.engine.max_positions is None else self.engine.max_positions - 1
        for index, ids in enumerate(targets):
            if most is not None and len(ids) > most:
                raise ConfigError(f"score: reference {index} has {len(ids)} subwords; the model reads at most {most}")
        return self.engine.score([np.asarray(ids, dtype=np.int64) for ids in sources], targets, self.decode)

    def attention(self, sentence: str, thresholds: Thresholds | None = None, **decoding: Any) -> dict[str, Any]:
        """One sentence's best translation with its cross-attention (every layer and head) and diagnostics, as
        nmt-serve's /attention gives."""
        if not isinstance(sentence, str):
            raise ConfigError(f"attention: expected one sentence (a str), got {type(sentence).__name__}")
        if not self.engine.abilities.attention:
            raise ExportError(f"{self._name()}: an exported model gives "
                              "no attention weights; load a checkpoint or run folder")
        translator, thresholds = self.with_decode(**decoding), thresholds or Thresholds()
        hyps = translator.hypotheses([sentence], return_attention=True)[0]
        if not hyps:
            return {"translation": "", "src": [], "tgt": [], "attention": [], "layers": [], "diagnostics": None}
        best, src_ids = hyps[0], translator.encode([sentence])[0]
        weights = best.attention.float()  # (T, S)
        stats = attention_stats(weights, thresholds, per_row=True)
        focused, uniform = row_classes(weights, thresholds)  # (T,) each
        stats["flags"] = flags(stats, thresholds)
        stats["row_flags"] = [[name for name, on in (("over-focused", f), ("near-uniform", u)) if on]
                              for f, u in zip(focused.tolist(), uniform.tolist())]
        layers = [{"name": name, "heads": [_rounded(head) for head in heads]}  # each head (T, S)
                  for name, heads in self.engine.layer_attention(src_ids, list(best.tokens))]
        src, tgt = translator.attention_labels(sentence, best)
        return {"translation": translator.detokenize(best), "score": round(best.score, 4), "src": src, "tgt": tgt,
                "attention": _rounded(weights), "layers": layers, "diagnostics": stats}

    def translate_markup(self, document: str, format: str = "html", *, ignore_tags: Collection[str] = (),
                         split_sentences: str | bool = "nonewlines", **decoding: Any) -> str:
        """An HTML or XML document translated with its markup kept (`nmt.markup`); code, pre, translate="no" and
        `ignore_tags` elements left alone."""
        return self.translate_markup_scored(document, format, ignore_tags=ignore_tags,
                                            split_sentences=split_sentences, **decoding).text

    def translate_markup_scored(self, document: str, format: str = "html", *, ignore_tags: Collection[str] = (),
                                split_sentences: str | bool = "nonewlines", warn: Warn | None = None,
                                **decoding: Any) -> Translation:
        """`translate_markup` as a `Translation` summed over its sentences."""
        aligner, done = self.with_decode(**decoding).aligned, []

        def translate(sentences: list[str]) -> list[Aligned]:
            results = aligner(sentences, warn=warn)
            done.extend(results)
            return results

        text = translate_document(document, format, translate, ignore_tags=ignore_tags,
                                  split=splitter(split_mode(split_sentences), self.languages[0]))
        return Translation(text, sum(a.score for a in done), sum(a.log_prob for a in done),
                           sum(a.tokens for a in done))

    def settings(self) -> dict[str, Any]:
        """Everything that decides the output, for reports."""
        decode = dataclasses.asdict(self.decode) | {"length_penalty": self.decode.alpha}
        return {"decode": decode, "engine": self.engine.name,
                "precision": self.engine.precision, "lowercase": self.lowercase,
                "members": [dataclasses.asdict(m) for m in self.members]}


def sentence_terms(pieces: Sequence[Pieces], glossary: GlossaryLike = None,
                   constraints: Sequence[Sequence[str]] | None = None) -> list[list[str]] | None:
    """Per sentence, the target terms to contain: glossary entries found in it and its text's `constraints` (refused
    for a text of several sentences)."""
    if constraints is not None:
        line_terms([" ".join(piece.sentences) for piece in pieces], None, constraints)  # checked per text
        for number, (piece, terms) in enumerate(zip(pieces, constraints), 1):
            if terms and len(piece.sentences) > 1:
                raise DataError(f"constraints of text {number}: it holds {len(piece.sentences)} sentences; give "
                                "constraints for a text of one sentence, or translate it whole (split_sentences off)")
        constraints = [terms for piece, terms in zip(pieces, constraints) for _ in piece.sentences]
    return line_terms([sentence for piece in pieces for sentence in piece.sentences], glossary, constraints)


def alignment_attention(layers: Sequence[tuple[str, torch.Tensor]], layer: int | None = None) -> torch.Tensor:
    """Decoder layer `layer`'s attention (from 1; negative from the last), averaged over heads and models; (T, S)."""
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
    """The lines of a str or sequence, and whether it was a str."""

    if isinstance(text, str):
        return [text], True
    lines = list(text)
    if not all(isinstance(line, str) for line in lines):
        raise ConfigError(f"{what}: expected a str or a sequence of str")
    return lines, False


def check_abilities(engine: Engine, decode: DecodeConfig,
                    label: Callable[[str], str] = lambda key: f"decode.{key}") -> None:
    """Refuse decoding settings the engine cannot search with."""
    abilities = engine.abilities
    if decode.beam > 1 and decode.stop not in abilities.stops:
        raise ConfigError(f"{label('stop')} {decode.stop}: the {engine.name} engine stops a sentence only "
                          f"by {', '.join(abilities.stops)}; decode a checkpoint for this rule")
    if decode.sampling and not abilities.sampling:
        raise ConfigError(f"{label('sampling')}: the {engine.name} engine does not sample; decode a checkpoint to "
                          "sample")
    if decode.n_best > 1 and not abilities.n_best:
        raise ConfigError(f"{label('n_best')} {decode.n_best}: the {engine.name} engine gives one translation "
                          "per sentence")
