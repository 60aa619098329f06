"""How the confidence ranks translations: Spearman's rho between each test sentence's confidence and its
sentence-level chrF.

Usage: python -m benchmarks.confidence MODEL [--split test] [--beam 5] [--device auto] [--threads N]

MODEL is a run folder, checkpoint file or export folder of a model of the Multi30k results (NMT_DATA_MIRROR finds
the test sets). Each line of its split (default test, test2016) is translated whole, as nmt-evaluate translates
it, with beam --beam and the length penalty stored with the model; its confidence (the exp of the per-token mean
log-probability, `Translation.confidence`) and its score (the length-penalized log-probability) are ranked against
its sentence-level chrF (sacreBLEU's) by Spearman's rank correlation, ties taking their mean rank. Also the mean
chrF of each quarter of the sentences ordered by confidence. Writes
benchmarks/results/confidence_<run>_<device>.json with the model's sha256.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import sacrebleu
import torch

from benchmarks.common import add_beam, add_split, begin, device_tag, finish, measurement_parser, run_name
from nmt.cli import command
from nmt.evaluation import split_pair
from nmt.loader import load_translator

MODULE = "benchmarks.confidence"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__)
    parser.add_argument("model", help="run folder, checkpoint file or export folder")
    add_split(parser)
    add_beam(parser)
    return parser.parse_args(argv)


def ranks(values: list[float]) -> np.ndarray:
    """The rank of each value, from 1, tied values taking the mean of their ranks: the values below it, plus the
    middle of the run of values equal to it."""
    data = np.asarray(values, dtype=np.float64)  # (N,)
    below = (data[None, :] < data[:, None]).sum(axis=1)  # (N,)
    equal = (data[None, :] == data[:, None]).sum(axis=1)  # (N,) itself included
    return below + (equal + 1) / 2


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rho: the Pearson correlation of the two lists' ranks."""
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def measure(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Each sentence's confidence, score and chrF, and how they rank together."""
    translator = load_translator([args.model], device, changes={"beam": args.beam, "n_best": 1})
    sources, refs = split_pair(translator.cfg, args.split)
    refs = [translator.normalize(ref) for ref in refs]  # as nmt-evaluate scores
    found = [nbest[0] for nbest in translator.translate_nbest(sources, split_sentences="off")]
    metric = sacrebleu.metrics.CHRF()
    chrf = [metric.sentence_score(t.text, [ref]).score for t, ref in zip(found, refs, strict=True)]
    confidence = [t.confidence for t in found]
    order = np.argsort(confidence, kind="stable")  # (N,) least confident first
    quarters = [round(float(np.mean([chrf[i] for i in part])), 2) for part in np.array_split(order, 4)]
    member = translator.members[0]
    return {"benchmark": "confidence", "run": run_name(member.path, translator.cfg.name),
            "checkpoint": member.path, "checkpoint_sha256": member.sha256, "updates": member.steps,
            "split": args.split, "sentences": len(sources), "beam": args.beam,
            "length_penalty": translator.decode.alpha, "engine": translator.engine.name,
            "chrf_signature": str(metric.get_signature()),
            "spearman_confidence_chrf": round(spearman(confidence, chrf), 4),
            "spearman_score_chrf": round(spearman([t.score for t in found], chrf), 4),
            "mean_confidence": round(float(np.mean(confidence)), 4),
            "mean_chrf": round(float(np.mean(chrf)), 2),
            "chrf_by_confidence_quarter": quarters}


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    result = measure(args, device)
    out = args.out_dir / f"confidence_{result['run']}_{device_tag(device)}.json"
    return finish(out, device, MODULE, argv, result, "Spearman's rho with sentence chrF: confidence "
                  f"{result['spearman_confidence_chrf']:.4f}, score {result['spearman_score_chrf']:.4f}; mean chrF "
                  f"by confidence quarter (lowest first) {result['chrf_by_confidence_quarter']}")


if __name__ == "__main__":
    sys.exit(main())
