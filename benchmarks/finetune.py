"""A fine-tuned child (train.init_from) against its parent on a test split, each decoded with its own stored
settings (beam and validation-chosen length penalty), through the Python API.

Usage: python -m benchmarks.finetune CHILD_RUN [--split test] [--device cpu] [--threads N]

The parent is the checkpoint the child's run recorded (its path and sha256 are checked against the file).
Writes benchmarks/results/finetune_<child run name>_<device>.json: both models' BLEU, chrF and sacreBLEU
signature, checkpoint sha256 and training updates, the child's recipe, and the git commit of this code.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import nmt
from benchmarks.common import add_split, begin, finish, measurement_parser
from nmt.checkpoint import find_checkpoint, load_contents
from nmt.cli import command
from nmt.errors import CheckpointError
from nmt.fileio import sha256_file
from nmt.run.folder import RunDir

MODULE = "benchmarks.finetune"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__)
    parser.add_argument("run", help="the child's run folder")
    add_split(parser)
    return parser.parse_args(argv)


def _scored(model: Path, split: str, device: Any) -> dict[str, Any]:
    report = nmt.evaluate(model, split=split, device=device)
    scores = report["scores"]
    return {"checkpoint": report["checkpoint"], "checkpoint_sha256": report["checkpoint_sha256"],
            "steps": report["checkpoint_progress"]["steps"], "beam": report["decode"]["beam"],
            "length_penalty": report["decode"]["length_penalty"], "bleu": round(scores["bleu"], 2),
            "chrf": round(scores["chrf"], 2), "bleu_signature": scores["bleu_signature"]}


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    child_file = find_checkpoint(args.run)
    parent = load_contents(child_file).progress.get("parent")
    if not parent:
        raise CheckpointError(f"{child_file}: not a fine-tuned model (its run had no train.init_from)")
    if sha256_file(Path(parent["path"])) != parent["sha256"]:
        raise CheckpointError(f"{parent['path']}: changed since {args.run} was fine-tuned from it (sha256 differs)")
    result = {"split": args.split, "parent": _scored(Path(parent["path"]), args.split, device),
              "child": _scored(child_file, args.split, device),
              "child_train": load_contents(child_file).config["train"]}
    result["bleu_gain"] = round(result["child"]["bleu"] - result["parent"]["bleu"], 2)
    out = Path(args.out_dir) / f"finetune_{RunDir.of(child_file).name}_{device.type}.json"
    return finish(out, device, MODULE, argv, result, f"{args.split}: parent BLEU {result['parent']['bleu']:.2f}, "
                  f"child {result['child']['bleu']:.2f} ({result['bleu_gain']:+.2f})")


if __name__ == "__main__":
    raise SystemExit(main())
