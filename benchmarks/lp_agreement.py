"""Do the PyTorch and CTranslate2 engines agree? Beam-search BLEU of a run and its float32 export at each length
penalty, and the share of identical test translations.

Usage: python -m benchmarks.lp_agreement RUN [RUN...] [--beam 5] [--penalties 0.6 1.0 1.5 2.0] [--same-at 1.0]
       [--stop finished] [--device auto] [--threads N]

For each run (folder or checkpoint file): exports its final checkpoint to CTranslate2 float32 (into a temporary
folder), translates the validation split with both engines at each penalty (beam --beam, stop --stop, the other
settings as stored with the run), and the test split at --same-at; writes
benchmarks/results/lp_agreement_<run name>_<device>.json with the BLEU table, the largest difference, the share
of identical test lines, and the model named by its checkpoint's sha256 and training updates.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from benchmarks.common import add_beam, begin, device_tag, finish, measurement_parser, run_name
from nmt.cli import command, number
from nmt.config import NON_NEGATIVE, STOP_RULES, TUNED_PENALTIES, decode_with
from nmt.evaluation import split_pair
from nmt.loader import load_translator
from nmt.translator import Translator

MODULE = "benchmarks.lp_agreement"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__, threads="CPU threads of both engines (default: torch's choice)",
                                out_dir="where the JSONs go")
    parser.add_argument("runs", nargs="+", help="run folders or checkpoint files")
    add_beam(parser)
    parser.add_argument("--penalties", type=number(NON_NEGATIVE), nargs="+", default=list(TUNED_PENALTIES),
                        help="length penalties of the validation table (default: those decode.length_penalty auto "
                             "tries)")
    parser.add_argument("--same-at", type=number(NON_NEGATIVE), default=1.0,
                        help="length penalty of the identical-lines count on the test split (default 1.0)")
    parser.add_argument("--stop", default="finished", choices=STOP_RULES[:1],
                        help="stopping rule (CTranslate2 has only 'finished')")
    return parser.parse_args(argv)


def _translate(translator: Translator, lines: list[str], changes: dict[str, Any]) -> list[str]:
    return translator.with_decode(decode_with(translator.decode, changes)).translate(lines, split_sentences="off")


def compare_run(run: str, args: argparse.Namespace, device: torch.device, out: Path) -> dict[str, Any]:
    """The agreement figures of one run, its export written to the new folder `out`."""
    from nmt.export import export_ctranslate2, read_manifest

    pytorch = load_translator([run], device, "fp32")
    export_ctranslate2(run, out, "float32")
    engines = {"pytorch": pytorch, "ctranslate2": load_translator([out], device)}
    base = {"beam": args.beam, "stop": args.stop, "n_best": 1}
    table = []
    val_sources, val_refs = split_pair(pytorch.cfg, "val")
    val_refs = [pytorch.normalize(r) for r in val_refs]
    for alpha in args.penalties:
        hyps = {name: _translate(t, val_sources, base | {"length_penalty": alpha}) for name, t in engines.items()}
        bleu = {name: round(sacrebleu.corpus_bleu(h, [val_refs]).score, 2) for name, h in hyps.items()}
        same = sum(a == b for a, b in zip(hyps["pytorch"], hyps["ctranslate2"], strict=True))
        table.append({"length_penalty": alpha, "pytorch_bleu": bleu["pytorch"], "ctranslate2_bleu": bleu["ctranslate2"],
                      "difference": round(bleu["pytorch"] - bleu["ctranslate2"], 2),
                      "identical_share": round(same / len(val_sources), 4)})
        print(f"{run} val lp {alpha:g}: pytorch {bleu['pytorch']:.2f}, ctranslate2 {bleu['ctranslate2']:.2f}, "
              f"identical {same}/{len(val_sources)}")
    test_sources, test_refs = split_pair(pytorch.cfg, "test")
    test_refs = [pytorch.normalize(r) for r in test_refs]
    hyps = {name: _translate(t, test_sources, base | {"length_penalty": args.same_at}) for name, t in engines.items()}
    same = sum(a == b for a, b in zip(hyps["pytorch"], hyps["ctranslate2"], strict=True))
    print(f"{run} test lp {args.same_at:g}: identical {same}/{len(test_sources)}")
    member = pytorch.members[0]
    return {"benchmark": "lp_agreement", "run": run_name(member.path, pytorch.cfg.name), "checkpoint": member.path,
            "checkpoint_sha256": member.sha256,
            "updates": member.steps, "train_minutes": member.minutes, "arch": pytorch.cfg.model.arch,
            "stored_length_penalty": pytorch.decode.length_penalty, "beam": args.beam, "stop": args.stop,
            "threads": torch.get_num_threads(), "ctranslate2_version": read_manifest(out)["ctranslate2_version"],
            "val": {"sentences": len(val_sources), "table": table,
                    "largest_difference": max(abs(row["difference"]) for row in table)},
            "test": {"sentences": len(test_sources), "length_penalty": args.same_at,
                     "identical_share": round(same / len(test_sources), 4),
                     "pytorch_bleu": round(sacrebleu.corpus_bleu(hyps["pytorch"], [test_refs]).score, 2),
                     "ctranslate2_bleu": round(sacrebleu.corpus_bleu(hyps["ctranslate2"], [test_refs]).score, 2)}}


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    with tempfile.TemporaryDirectory(prefix="bench_lp_agreement.") as folder:
        for index, run in enumerate(args.runs):
            result = compare_run(run, args, device, Path(folder) / str(index))
            out = args.out_dir / f"lp_agreement_{result['run']}_{device_tag(device)}.json"
            finish(out, device, MODULE, argv, result, "largest val BLEU difference "
                   f"{result['val']['largest_difference']:.2f}, identical test lines "
                   f"{100 * result['test']['identical_share']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
