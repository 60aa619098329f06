"""What sentence splitting does to paragraphs: a test set joined in groups of lines, translated with splitting and
without, against the same lines translated one by one.

Usage: python -m benchmarks.sentence_split MODEL [--split test] [--group 3] [--beam 5] [--device auto]
       [--threads N]

MODEL is a run folder, checkpoint file or export folder of a model of the Multi30k results (NMT_DATA_MIRROR finds
the test sets). Its split (default test, test2016) is joined in groups of --group consecutive lines, each group
one paragraph (its lines joined by a space), the references joined the same way. Three translations, all with
beam --beam and the length penalty stored with the model, scored with sacreBLEU as nmt-evaluate scores:
- `line_by_line`: each line on its own (what nmt-evaluate does), scored line by line, and the same translations
  joined in the groups and scored as paragraphs (`line_by_line_joined`: the fair comparison for the paragraphs);
- `split`: each paragraph split into sentences, translated and joined (`split_sentences="on"`);
- `unsplit`: each paragraph as one sequence (`split_sentences="off"`).
It also counts the paragraphs the splitter cut into exactly their lines, and those whose split translation is the
line-by-line one joined. Writes benchmarks/results/sentence_split_<run>_<device>.json with the model's sha256.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import sacrebleu
import torch

from benchmarks.common import (
    add_device,
    add_out_dir,
    add_threads,
    begin,
    command_line,
    device_tag,
    prog,
    run_name,
    write_result,
)
from nmt.cli import Parser, command, number
from nmt.config import AT_LEAST_ONE
from nmt.evaluation import split_pair
from nmt.sentences import split
from nmt.translator import load_translator

MODULE = "benchmarks.sentence_split"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("model", help="run folder, checkpoint file or export folder")
    parser.add_argument("--split", default="test", help="split of the model's dataset (default test: test2016)")
    parser.add_argument("--group", type=number(AT_LEAST_ONE, integer=True), default=3,
                        help="lines joined into one paragraph (default 3)")
    parser.add_argument("--beam", type=number(AT_LEAST_ONE, integer=True), default=5, help="beam size (default 5)")
    add_device(parser, precision=False)
    add_threads(parser, "CPU threads (default: torch's choice)")
    add_out_dir(parser)
    return parser.parse_args(argv)


def grouped(lines: list[str], size: int) -> list[str]:
    """`lines` joined by a space in groups of `size` consecutive lines (the last group may be shorter)."""
    return [" ".join(lines[i:i + size]) for i in range(0, len(lines), size)]


def measure(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The three translations of the paragraphs and their scores."""
    translator = load_translator([args.model], device, changes={"beam": args.beam, "n_best": 1})
    sources, refs = split_pair(translator.cfg, args.split)
    refs = [translator.normalize(ref) for ref in refs]  # as nmt-evaluate scores
    paragraphs, joined_refs = grouped(sources, args.group), grouped(refs, args.group)
    lines = [text for text, _ in translator.best(sources)]
    hyps = {"line_by_line_joined": grouped(lines, args.group),
            "split": translator.translate(paragraphs, split_sentences="on"),
            "unsplit": translator.translate(paragraphs, split_sentences="off")}
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    scores = {"line_by_line": {"bleu": round(bleu.corpus_score(lines, [refs]).score, 2),
                               "chrf": round(chrf.corpus_score(lines, [refs]).score, 2)}}
    for name, out in hyps.items():
        scores[name] = {"bleu": round(bleu.corpus_score(out, [joined_refs]).score, 2),
                        "chrf": round(chrf.corpus_score(out, [joined_refs]).score, 2)}
    exact = sum(len(split(p).sentences) == len(sources[i * args.group:(i + 1) * args.group])
                for i, p in enumerate(paragraphs))
    same = sum(a == b for a, b in zip(hyps["split"], hyps["line_by_line_joined"], strict=True))
    member = translator.members[0]
    return {"benchmark": "sentence_split", "run": run_name(member.path, translator.cfg.name),
            "checkpoint": member.path, "checkpoint_sha256": member.sha256, "updates": member.steps,
            "split": args.split, "sentences": len(sources), "group": args.group, "paragraphs": len(paragraphs),
            "beam": args.beam, "length_penalty": translator.decode.alpha, "engine": translator.engine.name,
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature()),
            "scores": scores, "split_into_their_lines": exact, "split_equals_line_by_line": same,
            "split_minus_line_by_line_joined_bleu": round(scores["split"]["bleu"]
                                                          - scores["line_by_line_joined"]["bleu"], 2)}


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    result = measure(args, device)
    out = args.out_dir / f"sentence_split_{result['run']}_{device_tag(device)}.json"
    write_result(out, device, command_line(MODULE, argv), result)
    for name, score in result["scores"].items():
        print(f"{name:>20}: BLEU {score['bleu']:6.2f}  chrF {score['chrf']:6.2f}")
    print(f"{result['split_into_their_lines']}/{result['paragraphs']} paragraphs split into their lines, "
          f"{result['split_equals_line_by_line']} translated as line by line -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
