"""Terminology: constrained beam search with terms taken from the references, a glossary of Multi30k terms, and the
speed of constrained against plain beam search.

Usage: python -m benchmarks.constraints MODEL [--sets test2016 test2017] [--beam 5] [--glossary TSV] [--speed]
       [--device auto] [--threads N] [--out-dir DIR]

MODEL is a run folder or checkpoint file of a Multi30k model (NMT_DATA_MIRROR finds the test sets; test2016 is the
dataset's `test` split). Each set is translated line by line, as nmt-evaluate translates it, with beam --beam and
the length penalty stored with the model, first without constraints. Then:

- Constraints from the references. eflomal (benchmarks/align.py) aligns each source line with its reference,
  trained unsupervised on the Multi30k training set together with the measured sets' (source, reference) pairs:
  no output of the model is aligned, and the references reach the aligner only as its training text does.
  Both sides are split into words and punctuation marks (WORD) and lowercased for it. A line's constraints are
  the first MOST_TERMS reference words, in order, that are content words (letters, with inner hyphens, at least
  two of them, not in STOPWORDS, not the reference's first word, whose capital may be only the sentence's), that
  the unconstrained output lacks (`holds`), and that eflomal links one-to-one: the reference word has exactly one
  link (both directions intersected) and its source word, which holds a letter, has no other. They are written
  as `nmt-translate --constraints` reads them (one line per source line, terms separated by tabs, a blank line
  for none) to OUT_DIR/constraints_<run>_<device>.<set>.terms, and the set is translated again with them.
  Reported: the lines given constraints; the share of their outputs that hold every term as whole words
  (casefolded, `holds`), and the share whose search met every term (its subwords, `Hypothesis.unmet`); BLEU and
  chrF (sacreBLEU, references normalized as nmt-evaluate reads them) with and without; and how many lines given
  no constraint differ from the unconstrained search in tokens or score (0 expected).
- A glossary (default benchmarks/data/multi30k_glossary.tsv; matched as nmt.glossary matches): per set, the
  lines a term fires in, the firings whose target term the reference lacks (`holds`: where the reference says
  something else, a plural included), per term too, the share of lines fired in whose output holds every
  target, BLEU and chrF with and without, and the lines no term fires in that differ (0 expected).
- --speed: on the first set, sentences/s of beam --beam without constraints, then with one constraint per line
  (its first reference constraint, else the first reference content word the output lacks, else the first one;
  written to OUT_DIR/constraints_<run>_<device>.<set>.speed.terms), the same lines in the same batches, each
  after a warm-up on two lines, one right after the other; and their ratio.

eflomal's sampling is not seeded, so a rerun may choose a few other terms: the .terms files written are the ones
measured. Writes OUT_DIR/constraints_<run>_<device>.json with the model's sha256 and the code's commit.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from benchmarks.align import Links, aligner, eflomal_links
from benchmarks.common import (
    ROOT,
    add_beam,
    begin,
    device_tag,
    finish,
    measurement_parser,
    run_name,
    timed,
)
from nmt.cli import command
from nmt.evaluation import split_pair
from nmt.fileio import atomic_output, sha256_file
from nmt.glossary import Glossary, load_glossary, words
from nmt.loader import load_translator
from nmt.search import Hypothesis
from nmt.translator import Translator

MODULE = "benchmarks.constraints"
GLOSSARY = ROOT / "benchmarks" / "data" / "multi30k_glossary.tsv"
SET_NAMES = {"test2016": "test"}  # Multi30k's test2016 is the dataset's test split
MOST_TERMS = 2  # reference constraints per line
WORD = re.compile(r"\w+(?:['’-]\w+)*|[^\w\s]")  # what eflomal aligns: words (inner hyphens, apostrophes) and marks
CONTENT = re.compile(r"[^\W\d_]{2,}(?:-[^\W\d_]+)*|[^\W\d_]+(?:-[^\W\d_]+)+")  # letters only, two at least
# English function words (articles, pronouns, prepositions, conjunctions, auxiliaries, particles): never a term.
STOPWORDS = frozenset("""
a an the this that these those some any each every either neither no all both few many much more most other another
such own same several i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his
himself she her hers herself it its itself they them their theirs themselves one ones someone something anyone
anything everyone everything nobody nothing who whom whose which what whatever about above across after against
along amid among around as at before behind below beneath beside besides between beyond by down during except for
from in inside into like near of off on onto out outside over past per since than through throughout till to
toward towards under underneath until up upon via with within without and but or nor so yet because although though
while whereas if unless whether when where whenever wherever then am is are was were be been being have has had
having do does did doing will would shall should can could may might must not very too also just only even still
here there now again once ever never always often almost quite rather how why next
""".split())


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__, out_dir="where the JSON and the constraints files go")
    parser.add_argument("model", help="run folder or checkpoint file")
    parser.add_argument("--sets", nargs="+", default=["test2016", "test2017"],
                        help="splits of the model's dataset to measure on (default test2016 test2017; test2016 is "
                             "the split test)")
    add_beam(parser)
    parser.add_argument("--glossary", type=Path, default=GLOSSARY,
                        help=f"glossary TSV (default {GLOSSARY.relative_to(ROOT)})")
    parser.add_argument("--speed", action="store_true",
                        help="also time beam search without and with one constraint per line on the first set")
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------------- choosing terms


def tokens(text: str) -> list[str]:
    """The words and punctuation marks of `text`, as eflomal aligns them."""
    return WORD.findall(text)


def is_content(word: str) -> bool:
    """Whether `word` may be a term: letters (inner hyphens allowed), two at least, and no stopword."""
    return CONTENT.fullmatch(word) is not None and word.casefold() not in STOPWORDS


def holds(text: str, term: str) -> bool:
    """Whether `text` holds the words of `term` one after the other, as whole words (nmt.glossary's words:
    casefolded runs of letters and digits)."""
    found, wanted = words(text), words(term)
    return bool(wanted) and any(found[i:i + len(wanted)] == wanted for i in range(len(found) - len(wanted) + 1))


def one_to_one(links: Links, target: int) -> int | None:
    """The source word linked to target word `target` when that is its only link and the source word has no
    other; else None."""
    sources = [s for s, t in links if t == target]
    if len(sources) != 1 or sum(1 for s, _ in links if s == sources[0]) != 1:
        return None
    return sources[0]


def reference_terms(source: list[str], reference: list[str], output: str, links: Links,
                    most: int = MOST_TERMS) -> list[str]:
    """A line's constraints: the first `most` distinct reference words, in order, that are content words (never
    the first word), that `output` lacks and that `links` (source word, reference word) links one-to-one to a
    source word with a letter."""
    chosen: list[str] = []
    for index, word in enumerate(reference):
        if len(chosen) == most:
            break
        if index == 0 or not is_content(word) or holds(output, word) or \
                word.casefold() in (c.casefold() for c in chosen):
            continue
        linked = one_to_one(links, index)
        if linked is not None and any(c.isalpha() for c in source[linked]):
            chosen.append(word)
    return chosen


def speed_term(reference: list[str], output: str, chosen: list[str]) -> list[str]:
    """One constraint for the speed measurement: the first of `chosen`, else the first reference content word
    (after its first word) that `output` lacks, else the first content word; none for a reference without one."""
    if chosen:
        return chosen[:1]
    content = [word for word in reference[1:] if is_content(word)] + [word for word in reference[:1] if
                                                                      is_content(word)]
    lacking = [word for word in content if not holds(output, word)]
    return (lacking or content)[:1]


def terms_text(terms: Sequence[Sequence[str]]) -> str:
    """A constraints file as `nmt-translate --constraints` reads it: one line per input line, terms separated by
    tabs, an empty line for none."""
    return "".join("\t".join(line) + "\n" for line in terms)


# ---------------------------------------------------------------------------------------------- judging outputs


def coverage(outputs: Sequence[str], terms: Sequence[Sequence[str]]) -> tuple[int, int]:
    """(lines with terms, those whose output holds every one of them as whole words)."""
    given = [(output, line) for output, line in zip(outputs, terms, strict=True) if line]
    return len(given), sum(all(holds(output, term) for term in line) for output, line in given)


def differences(plain: Sequence[list[Hypothesis]], constrained: Sequence[list[Hypothesis]],
                terms: Sequence[Sequence[str]]) -> int:
    """Lines without terms whose best hypothesis differs between the two searches in tokens or score (lines
    without subwords have none in either)."""
    def best(nbest: list[Hypothesis]) -> tuple[list[int], float] | None:
        return (nbest[0].tokens, nbest[0].score) if nbest else None

    return sum(best(a) != best(b) for a, b, line in zip(plain, constrained, terms, strict=True) if not line)


def texts(translator: Translator, nbest: Sequence[list[Hypothesis]]) -> list[str]:
    """The best translation of each line ("" for a line without subwords)."""
    return [translator.detokenize(hyps[0]) if hyps else "" for hyps in nbest]


class Scores:
    """Corpus BLEU and chrF (sacreBLEU) against one set of references."""

    def __init__(self, refs: list[str]) -> None:
        self.bleu, self.chrf = sacrebleu.metrics.BLEU(references=[refs]), sacrebleu.metrics.CHRF(references=[refs])

    def __call__(self, hyps: list[str]) -> dict[str, float]:
        return {"bleu": round(self.bleu.corpus_score(hyps, None).score, 2),
                "chrf": round(self.chrf.corpus_score(hyps, None).score, 2)}

    def signatures(self) -> dict[str, str]:
        return {"bleu": str(self.bleu.get_signature()), "chrf": str(self.chrf.get_signature())}


def share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


# ---------------------------------------------------------------------------------------------- measuring


def glossary_figures(translator: Translator, glossary: Glossary, sources: list[str], refs: list[str],
                     plain: list[list[Hypothesis]], scores: Scores) -> dict[str, Any]:
    """Where the glossary's terms fire in a set, where the reference says something else, and the scores with it."""
    terms = [glossary.terms_for(line) for line in sources]
    by_target: dict[str, list[str]] = {}
    for source, target in glossary.entries:
        by_target.setdefault(target, []).append(source)
    fired = translator.hypotheses(sources, terms=terms)
    outputs = texts(translator, fired)
    per_term: dict[str, dict[str, int]] = {}
    for line, ref in zip(terms, refs, strict=True):
        for target in line:
            row = per_term.setdefault(target, {"fired": 0, "absent_from_reference": 0})
            row["fired"] += 1
            row["absent_from_reference"] += not holds(ref, target)
    given, holding = coverage(outputs, terms)
    firings = sum(row["fired"] for row in per_term.values())
    absent = sum(row["absent_from_reference"] for row in per_term.values())
    return {"lines_fired_in": given, "firings": firings, "absent_from_reference": absent,
            "absent_from_reference_share": share(absent, firings),
            "outputs_holding_every_target_share": share(holding, given),
            "scores": {"without": scores(texts(translator, plain)), "with": scores(outputs)},
            "lines_not_fired_in_differing": differences(plain, fired, terms),
            "terms": {f"{' / '.join(by_target[target])} -> {target}": row
                      for target, row in sorted(per_term.items(), key=lambda item: -item[1]["fired"])}}


def constraint_figures(translator: Translator, sources: list[str], outputs: list[str],
                       plain: list[list[Hypothesis]], terms: list[list[str]], scores: Scores) -> dict[str, Any]:
    """The reference constraints of a set: how many lines got them, whether the outputs hold them, the scores
    with and without, and the lines without constraints that changed."""
    constrained = translator.hypotheses(sources, terms=terms)
    given, holding = coverage(texts(translator, constrained), terms)
    met = sum(1 for hyps, line in zip(constrained, terms, strict=True) if line and hyps and hyps[0].unmet == 0)
    return {"lines_given_constraints": given, "terms": sum(len(line) for line in terms),
            "lines_given_two": sum(len(line) == 2 for line in terms),
            "outputs_holding_every_term_share": share(holding, given),
            "searches_meeting_every_term_share": share(met, given),
            "scores": {"without": scores(outputs), "with": scores(texts(translator, constrained))},
            "lines_without_constraints": len(sources) - given,
            "lines_without_constraints_differing": differences(plain, constrained, terms)}


def speed(translator: Translator, sources: list[str], terms: list[list[str]]) -> dict[str, Any]:
    """Sentences/s without constraints, then with `terms`: the same lines (so the same batches), each after a
    warm-up on two lines."""
    device = translator.engine.device
    out: dict[str, Any] = {}
    for name, line_terms in (("without", None), ("with_one_constraint", terms)):
        translator.hypotheses(sources[:2], terms=None if line_terms is None else line_terms[:2])  # warm-up
        nbest, seconds = timed(functools.partial(translator.hypotheses, sources, terms=line_terms), device)
        out[name] = {"seconds": round(seconds, 3), "sentences_per_s": round(len(sources) / seconds, 2),
                     "tgt_tokens_per_s": round(sum(len(h[0].tokens) + 1 for h in nbest if h) / seconds, 1)}
    out["lines"], out["lines_given_a_constraint"] = len(sources), sum(1 for line in terms if line)
    out["ratio"] = round(out["with_one_constraint"]["sentences_per_s"] / out["without"]["sentences_per_s"], 3)
    return out


def write_terms(path: Path, terms: Sequence[Sequence[str]]) -> dict[str, str]:
    """Write a constraints file; its name and sha256 for the record."""
    with atomic_output(path) as handle:
        handle.write(terms_text(terms))
    return {"file": path.name, "sha256": sha256_file(path)}


def shown(path: Path) -> str:
    """`path` as a record names it: relative to the repository when inside it."""
    full = path.resolve()
    return str(full.relative_to(ROOT) if full.is_relative_to(ROOT) else path)


def aligner_version() -> str | None:
    try:
        return version("eflomal")
    except PackageNotFoundError:
        return None


def measure(args: argparse.Namespace, translator: Translator, glossary: Glossary, stem: str) -> dict[str, Any]:
    """Every figure of the module's docstring; the constraints files go to args.out_dir, named from `stem`
    (constraints_<run>_<device>) and the set."""
    cfg = translator.cfg
    sets: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(args.sets):
        sources, refs = split_pair(cfg, SET_NAMES.get(name, name))
        refs = [translator.normalize(ref) for ref in refs]  # as nmt-evaluate scores
        plain = translator.hypotheses(sources)
        sets[name] = {"sources": sources, "refs": refs, "plain": plain, "outputs": texts(translator, plain),
                      "pairs": [(" ".join(tokens(translator.normalize(s))), " ".join(tokens(r)))
                                for s, r in zip(sources, refs, strict=True)]}
        print(f"{name}: {len(sources)} lines translated without constraints")
    train_sources, train_refs = split_pair(cfg, "train")
    train = ([" ".join(tokens(translator.normalize(s))) for s in train_sources],
             [" ".join(tokens(translator.normalize(r))) for r in train_refs])
    links = eflomal_links([pair for found in sets.values() for pair in found["pairs"]], train)
    results: dict[str, Any] = {}
    for name, found in sets.items():
        terms = [reference_terms(s.split(), r.split(), output, links[(s, r)])
                 for (s, r), output in zip(found["pairs"], found["outputs"], strict=True)]
        scores = Scores(found["refs"])
        row = constraint_figures(translator, found["sources"], found["outputs"], found["plain"], terms, scores)
        row = {"lines": len(found["sources"]), "constraints_file": write_terms(
            args.out_dir / f"{stem}.{name}.terms", terms), **row}
        row["glossary"] = glossary_figures(translator, glossary, found["sources"], found["refs"], found["plain"],
                                           scores)
        results[name] = row
        found["terms"] = terms
        print(f"{name}: {row['lines_given_constraints']} lines constrained, every term held in "
              f"{row['outputs_holding_every_term_share']}, scores {row['scores']}; glossary fired in "
              f"{row['glossary']['lines_fired_in']} lines, scores {row['glossary']['scores']}")
    member = translator.members[0]
    out = {"benchmark": "constraints", "run": run_name(member.path, cfg.name), "checkpoint": member.path,
           "checkpoint_sha256": member.sha256, "updates": member.steps,
           "decode": translator.settings()["decode"], "engine": translator.engine.name,
           "threads": torch.get_num_threads(),
           "aligner": {"name": "eflomal", "version": aligner_version(),
                       "trained_on": f"{cfg.name}'s training set with the (source, reference) pairs of "
                                     f"{', '.join(sets)}, unsupervised, lowercased, both directions intersected"},
           "signatures": scores.signatures(), "most_terms": MOST_TERMS,
           "glossary": {"file": shown(args.glossary), "sha256": sha256_file(args.glossary), "entries": len(glossary)},
           "sets": results}
    if args.speed:
        first = next(iter(sets))
        found = sets[first]
        terms = [speed_term(r.split(), output, chosen)
                 for (_, r), output, chosen in zip(found["pairs"], found["outputs"], found["terms"], strict=True)]
        out["speed"] = {"set": first, "constraints_file": write_terms(args.out_dir / f"{stem}.{first}.speed.terms",
                                                                      terms),
                        **speed(translator, found["sources"], terms)}
        print(f"speed on {first}: {out['speed']['without']['sentences_per_s']} sentences/s without constraints, "
              f"{out['speed']['with_one_constraint']['sentences_per_s']} with one (x{out['speed']['ratio']})")
    return out


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    aligner()  # before any model loads: without eflomal there is nothing to measure
    glossary = load_glossary(args.glossary)  # a faulty glossary fails before any model loads too
    translator = load_translator([args.model], device, changes={"beam": args.beam, "n_best": 1})
    stem = f"constraints_{run_name(translator.members[0].path, translator.cfg.name)}_{device_tag(device)}"
    result = measure(args, translator, glossary, stem)
    return finish(args.out_dir / f"{stem}.json", device, MODULE, argv, result)


if __name__ == "__main__":
    sys.exit(main())
