"""What sentence splitting does to paragraphs: a test set joined in groups of lines, translated with splitting and
without, against the same lines translated one by one.

Usage: python -m benchmarks.sentence_split MODEL [--split test] [--group 3] [--beam 5] [--device auto]
       [--threads N]

MODEL is a run folder, checkpoint file or export folder of a model of the Multi30k results (NMT_DATA_MIRROR finds
the test sets). Its split (default test, test2016) is cut into groups of --group consecutive lines, each group one
paragraph, in two forms:
- `text`, as real text is written: lines are joined by a space, except that a line without a sentence-final mark
  (`.`, `!`, `?`, `…`, before any closing quotes or brackets) stands on a line of its own, as a heading or a caption
  does; a line break before and after it;
- `spaces`: every line joined by a space, stops or not (a caption without a stop then runs into the next line's
  sentence, which no splitter can undo).
The references are joined by a space. Three translations, all with beam --beam and the length penalty stored with
the model, scored with sacreBLEU as nmt-evaluate scores (line breaks in a paragraph's translation count as
spaces):
- `line_by_line`: each line on its own (what nmt-evaluate does), scored line by line, and the same translations
  joined as the paragraphs are (`line_by_line_joined`: the fair comparison for the paragraphs);
- `split`: each paragraph split into sentences, translated and joined (`split_sentences="on"`);
- `unsplit`: each paragraph as one sequence (`split_sentences="off"`; one figure for both forms, as the model
  reads a line break as a space).
For each form it also counts the paragraphs the splitter cut into exactly their lines, and those whose split
translation is the line-by-line one joined. Writes benchmarks/results/sentence_split_<run>_<device>.json with the
model's sha256.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import sacrebleu
import torch

from benchmarks.common import add_beam, add_split, begin, device_tag, finish, measurement_parser, run_name
from nmt.cli import command, number
from nmt.config import AT_LEAST_ONE
from nmt.evaluation import split_pair
from nmt.loader import load_translator
from nmt.sentences import one_line, split

MODULE = "benchmarks.sentence_split"
BLEU, CHRF = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__)
    parser.add_argument("model", help="run folder, checkpoint file or export folder")
    add_split(parser)
    parser.add_argument("--group", type=number(AT_LEAST_ONE, integer=True), default=3,
                        help="lines joined into one paragraph (default 3)")
    add_beam(parser)
    return parser.parse_args(argv)


FORMS = ("text", "spaces")
FINAL_MARKS = (".", "!", "?", "…")
CLOSERS = "\"'“”„»«)]"


def ends_sentence(line: str) -> bool:
    """Whether `line` ends with a sentence-final mark, before any closing quotes or brackets."""
    return line.rstrip().rstrip(CLOSERS).endswith(FINAL_MARKS)


def separators(lines: list[str], form: str) -> list[str]:
    """What follows each of `lines` but the last inside its paragraph, in a paragraph form of FORMS: a space, or
    in `text` a line break around a line without a sentence-final mark."""
    if form == "spaces":
        return [" "] * (len(lines) - 1)
    return ["\n" if not (ends_sentence(a) and ends_sentence(b)) else " " for a, b in zip(lines, lines[1:])]


def grouped(texts: list[str], size: int, between: list[str]) -> list[str]:
    """`texts` joined in groups of `size` consecutive texts (the last group may be shorter), `between[i]` going
    between texts i and i + 1."""
    groups = []
    for start in range(0, len(texts), size):
        end = min(start + size, len(texts))
        groups.append("".join(text + sep for text, sep in zip(texts[start:end], between[start:end - 1]))
                      + texts[end - 1])
    return groups


def scores(hyps: list[str], refs: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF of `hyps` (line breaks read as spaces) against `refs`."""
    hyps = [one_line(hyp) for hyp in hyps]
    return {"bleu": round(BLEU.corpus_score(hyps, [refs]).score, 2),
            "chrf": round(CHRF.corpus_score(hyps, [refs]).score, 2)}


def measure(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The translations of the paragraphs in each form and their scores."""
    translator = load_translator([args.model], device, changes={"beam": args.beam, "n_best": 1})
    sources, refs = split_pair(translator.cfg, args.split)
    refs = [translator.normalize(ref) for ref in refs]  # as nmt-evaluate scores
    joined_refs = grouped(refs, args.group, [" "] * (len(refs) - 1))
    lines = [translator.detokenize(found[0]) if found else "" for found in translator.hypotheses(sources)]
    sizes = [len(sources[i:i + args.group]) for i in range(0, len(sources), args.group)]
    # A paragraph whole reads the same in both forms: the model sees each line break as a space.
    unsplit = translator.translate(grouped(sources, args.group, separators(sources, "spaces")), split_sentences="off")
    forms = {}
    for form in FORMS:
        between = separators(sources, form)
        paragraphs, by_line = grouped(sources, args.group, between), grouped(lines, args.group, between)
        split_hyps = translator.translate(paragraphs, split_sentences="on")
        result = {"scores": {"line_by_line_joined": scores(by_line, joined_refs),
                             "split": scores(split_hyps, joined_refs)},
                  "paragraphs_with_line_breaks": sum("\n" in paragraph for paragraph in paragraphs),
                  "split_into_their_lines": sum(len(split(paragraph, language="de").sentences) == size
                                                for paragraph, size in zip(paragraphs, sizes, strict=True)),
                  "split_equals_line_by_line": sum(a == b for a, b in zip(split_hyps, by_line, strict=True))}
        result["split_minus_line_by_line_joined_bleu"] = round(
            result["scores"]["split"]["bleu"] - result["scores"]["line_by_line_joined"]["bleu"], 2)
        forms[form] = result
    member = translator.members[0]
    return {"benchmark": "sentence_split", "run": run_name(member.path, translator.cfg.name),
            "checkpoint": member.path, "checkpoint_sha256": member.sha256, "updates": member.steps,
            "split": args.split, "sentences": len(sources), "group": args.group, "paragraphs": len(sizes),
            "lines_without_final_mark": sum(not ends_sentence(line) for line in sources),
            "beam": args.beam, "length_penalty": translator.decode.alpha, "engine": translator.engine.name,
            "bleu_signature": str(BLEU.get_signature()), "chrf_signature": str(CHRF.get_signature()),
            "line_by_line": scores(lines, refs), "unsplit": scores(unsplit, joined_refs), "forms": forms}


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    result = measure(args, device)
    out = args.out_dir / f"sentence_split_{result['run']}_{device_tag(device)}.json"
    for name in ("line_by_line", "unsplit"):
        score = result[name]
        print(f"{name:>26}: BLEU {score['bleu']:6.2f}  chrF {score['chrf']:6.2f}")
    for form, figures in result["forms"].items():
        for name, score in figures["scores"].items():
            print(f"{form + ' ' + name:>26}: BLEU {score['bleu']:6.2f}  chrF {score['chrf']:6.2f}")
        print(f"{form:>26}: {figures['split_into_their_lines']}/{result['paragraphs']} paragraphs split into their "
              f"lines, {figures['split_equals_line_by_line']} translated as line by line")
    return finish(out, device, MODULE, argv, result)


if __name__ == "__main__":
    sys.exit(main())
