"""The one way from text to text: split into sentences, normalize, encode, truncate, search, detokenize, join.

A `Translator` joins a tokenizer, a validated `DecodeConfig` and an engine (`nmt.engines`) that searches over
source ids; `nmt.loader` builds one from a run folder, checkpoints or an export. Its text methods (`translate`,
`translate_nbest`, `translate_markup`, `score`, `attention`) are the user's; `prepare` and `translations` are the
same pipeline in two halves, for a caller that searches several requests' texts at once (the server); `hypotheses`
searches lines whole, and `encode`, `search_batch`, `score_batch` and `detokenize` serve callers that bring their
own token ids.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nmt.config import Config, DecodeConfig, decode_with
from nmt.data import normalize
from nmt.diagnostics import Thresholds, attention_stats, flags, row_classes
from nmt.engines import Engine
from nmt.engines.ctranslate2 import NO_GLOSSARY
from nmt.errors import ConfigError, DataError, ExportError
from nmt.glossary import GlossaryLike, line_terms
from nmt.markup import Aligned, splitter, translate_document, word_weights
from nmt.search import Hypothesis
from nmt.sentences import Pieces, split, split_mode
from nmt.tokenizer import Tokenizer

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


@dataclass(frozen=True)
class Texts:
    """Texts split into sentences, with the target terms each sentence's translation must contain (None: no
    glossary or constraints): what `Translator.translations` searches in one batch."""

    pieces: tuple[Pieces, ...]
    terms: list[list[str]] | None = None

    @property
    def sentences(self) -> list[str]:
        return [sentence for piece in self.pieces for sentence in piece.sentences]

    def owners(self) -> list[int]:
        """For each sentence, the index of its text."""
        return [index for index, piece in enumerate(self.pieces) for _ in piece.sentences]

    @staticmethod
    def joined(parts: Sequence[Texts]) -> Texts:
        """Several as one, in order, so that one search serves them all; all with terms or all without."""
        terms = None if parts[0].terms is None else [terms for part in parts for terms in part.terms or []]
        return Texts(tuple(piece for part in parts for piece in part.pieces), terms)


class Translator:
    """Text in, text out, with one engine, one tokenizer and one validated decoding configuration."""

    def __init__(self, engine: Engine, tokenizer: Tokenizer, decode: DecodeConfig, lowercase: bool,
                 members: Sequence[Member] = (), cfg: Config | None = None) -> None:
        if engine.max_positions is not None and decode.max_source_tokens >= engine.max_positions:
            # a longer source (with its EOS) has no position encodings: truncate to what the model covers
            decode = dataclasses.replace(decode, max_source_tokens=engine.max_positions - 1)
        self.engine, self.tokenizer, self.decode, self.lowercase = engine, tokenizer, decode, lowercase
        self.members = list(members)  # the models it decodes with, as the reports name them
        self.cfg = cfg  # the (first) member's training config: its dataset, experiment name, ...

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
        return normalize(line, self.lowercase)

    def translate(self, text: str | Sequence[str], warn: Warn | None = None, *, split_sentences: str | bool = "on",
                  glossary: GlossaryLike = None, constraints: Sequence[str] | Sequence[Sequence[str]] | None = None,
                  **decoding: Any) -> str | list[str]:
        """The best translation of a text (a str), or of each text of a sequence (a list; "" for a blank one).
        Each text is split into sentences (`split_sentences`: on, off or nonewlines, as `nmt.sentences.split`),
        translated in one batch and joined with the text's own whitespace. `glossary` (a `Glossary`, a {source
        term: target term} mapping, (source, target) pairs, or a TSV/CSV file's path) and `constraints` (the
        target terms of a str, or a list of them per text) name target terms the translations must contain
        (`sentence_terms`); `decoding` overrides decode.* settings (beam, length_penalty, ...) for this call; `warn`
        hears of each truncated sentence: its text's index and its subword count."""
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
        """The n best translations (default: decode.n_best, at most the beam), best first, as `Translation`s (text,
        score, mean_log_prob, confidence): for a str one list, for a sequence one list per text (a text of several
        sentences: the combinations of one hypothesis per sentence with the highest summed score). The score is
        nmt-translate --scores': the summed log-probability (EOS included) over the GNMT length penalty, summed
        over the text's sentences. `glossary` and `constraints` as `translate` takes them."""
        lines, one = _lines(text)
        constraints = [constraints] if one and constraints is not None else constraints
        texts = self.prepare(lines, split_sentences, glossary=glossary, constraints=constraints)
        out = self.with_decode(**({"n_best": n} if n is not None else {}), **decoding).translations(texts)
        return out[0] if one else out

    def prepare(self, texts: Sequence[str], split_sentences: str | bool = "on", *, glossary: GlossaryLike = None,
                constraints: Sequence[Sequence[str]] | None = None) -> Texts:
        """The first half of `translate`: texts split into sentences (`nmt.sentences.split` in mode
        `split_sentences`) with their target terms (`sentence_terms`). A malformed glossary or constraint is a
        `DataError`; nothing is searched yet."""
        mode = split_mode(split_sentences)
        pieces = tuple(split(text, mode) for text in texts)
        return Texts(pieces, sentence_terms(pieces, glossary, constraints))

    def translations(self, texts: Texts, warn: Warn | None = None,
                     return_attention: bool = False) -> list[list[Translation]]:
        """The second half of `translate`: every sentence of `texts` searched in one batch, and each text's n-best
        list made of its sentences' (`combine`); a text without subwords gives an empty list. `warn` hears of
        truncated sentences by their text's index; `return_attention` keeps each hypothesis's attention."""
        owner = texts.owners()
        sources = self.encode(texts.sentences, None if warn is None else lambda j, n: warn(owner[j], n))
        terms = None if texts.terms is None else [self._term_ids(line) for line in texts.terms]
        nbest = self.engine.search(sources, self.decode, return_attention, **self._constraints(terms))
        out, start = [], 0
        for piece in texts.pieces:
            out.append(self._combine(piece, nbest[start:start + len(piece.sentences)]))
            start += len(piece.sentences)
        return out

    def _combine(self, pieces: Pieces, nbest: Sequence[list[Hypothesis]]) -> list[Translation]:
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

    def hypotheses(self, lines: Sequence[str], *, terms: Sequence[Sequence[str]] | None = None,
                   warn: Warn | None = None, return_attention: bool = False) -> list[list[Hypothesis]]:
        """Each line's n-best hypotheses, in input order, the line searched whole as one sentence (never split:
        what evaluation scores against aligned references); a line without subwords gives an empty list.
        `terms`: per line, the target terms its translations must contain (`nmt.glossary.line_terms`)."""
        term_ids = None if terms is None else [self._term_ids(line) for line in terms]
        return self.search_batch(self.encode(lines, warn), terms=term_ids, return_attention=return_attention)

    def encode(self, lines: Sequence[str], warn: Warn | None = None) -> list[np.ndarray]:
        """Normalized, encoded and truncated source ids (no EOS), none for a blank line; `warn` hears of each
        truncated line."""
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
        """Each source's n-best hypotheses, in input order: source ids (no EOS; `encode` makes them) searched as
        given. `terms`: per source, the target terms (ids, as `encode_tgt` gives them) its outputs must contain,
        each as a whole word. A source without ids gives an empty list."""
        sources = [np.asarray(ids, dtype=np.int64) for ids in sources]
        term_ids = None if terms is None else [[np.asarray(t, dtype=np.int64) for t in line] for line in terms]
        return self.engine.search(sources, self.decode, return_attention, **self._constraints(term_ids))

    def _term_ids(self, terms: Sequence[str]) -> list[np.ndarray]:
        """Target terms as the search reads them: normalized and encoded alone, so a term opens a word."""
        ids = self.tokenizer.encode_tgt([self.normalize(term) for term in terms]) if terms else []
        return [np.asarray(term, dtype=np.int64) for term in ids if len(term)]

    def _constraints(self, terms: list[list[np.ndarray]] | None) -> dict[str, Any]:
        """The engine's arguments for target terms: none without them; refused by an engine that cannot."""
        if terms is None:
            return {}
        if not self.engine.abilities.constraints:
            raise ExportError(f"{self._name()}: {NO_GLOSSARY}")
        return {"constraints": terms, "continuations": self.tokenizer.tgt_word_continuations}

    def _name(self) -> str:
        """How errors name the model: its (first) member's path."""
        return self.members[0].path if self.members else "this model"

    def detokenize(self, hyp: Hypothesis) -> str:
        """A hypothesis's text."""
        return self.tokenizer.decode_tgt(hyp.tokens)

    def attention_labels(self, line: str, hyp: Hypothesis) -> tuple[list[str], list[str]]:
        """The labels of `hyp`'s attention over `line`: its columns, the source subwords as the search read them
        (truncated) and EOS; its rows, the target subwords and EOS."""
        src = self.tokenizer.src_pieces(self.normalize(line))[:self.decode.max_source_tokens]
        return src + ["</s>"], self.tokenizer.tgt_id_pieces(hyp.tokens) + ["</s>"]

    def aligned(self, sentences: Sequence[str], layer: int | None = None) -> list[Aligned]:
        """Each sentence's best translation with its word alignment: the cross-attention of decoder layer `layer`
        (default ALIGNMENT_LAYER; see `alignment_attention`), averaged over its heads (and an ensemble's members),
        summed from subwords into the whitespace-separated words of both sides; the search's own attention for a
        model without layers of heads (a GRU); none where the engine gives no attention."""
        attention = self.engine.abilities.attention
        out = []
        for sentence, hyps in zip(sentences, self.hypotheses(sentences, return_attention=attention)):
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
        targets = self.tokenizer.encode_tgt([self.normalize(line) for line in ref_lines])
        token_log_probs = self.score_batch(self.encode(src_lines), targets)
        out = [ReferenceScore(float(lp.sum()), len(lp)) for lp in token_log_probs]
        return out[0] if one else out

    def score_batch(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Each target's token log-probabilities given its source (forced decoding), EOS's last: source ids as
        `encode` gives them, target ids without BOS or EOS."""
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
        """One sentence's best translation with its cross-attention: source and target subwords (each ending in
        EOS), the weights (rows: target subwords; columns: source subwords), every layer and head of a
        Transformer, and the attention diagnostics under `thresholds`: what nmt-serve's /attention gives."""
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
        """A marked-up document (`format` "html" or "xml") translated with its markup as it was (`nmt.markup`):
        each block's text is split into sentences (`split_sentences`, as for `translate`; by default a line
        break is whitespace, as in markup) and translated, and inline tags inside a sentence are placed by the
        word alignment of `aligned`; an engine without attention (a CTranslate2 export) puts them at their
        sentence's edges. Text in code, pre, translate="no" elements and elements named in `ignore_tags` is left
        alone. `decoding` as for `translate`; a document that cannot be read is a `MarkupError`."""
        return self.translate_markup_scored(document, format, ignore_tags=ignore_tags,
                                            split_sentences=split_sentences, **decoding).text

    def translate_markup_scored(self, document: str, format: str = "html", *, ignore_tags: Collection[str] = (),
                                split_sentences: str | bool = "nonewlines", **decoding: Any) -> Translation:
        """`translate_markup`'s document as a `Translation`: its score, log-probability and tokens are the sums
        over every sentence it translated, so its confidence is the token-weighted mean over them (text left alone
        is not scored; a document with no text to translate has 0 tokens and a NaN confidence)."""
        aligner, done = self.with_decode(**decoding).aligned, []

        def translate(sentences: list[str]) -> list[Aligned]:
            results = aligner(sentences)
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
    return line_terms([sentence for piece in pieces for sentence in piece.sentences], glossary, constraints)


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
