"""Decoding speed of a trained run: greedy and beam search, PyTorch and its CTranslate2 exports, with BLEU.

Usage: python -m benchmarks.decode RUN [--split test] [--limit N] [--beam 5] [--device auto] [--threads N]
       [--export float32 int8 | --export]

Translates the run's split (as nmt-evaluate reads it, through the same Translator) and writes
benchmarks/results/decode_<run name>_<device>.json with, per search (greedy and beam): sentences/s and target
tokens/s (EOS included) of the PyTorch model one sentence at a time and batched (decode.batch_tokens source
tokens per batch), and, per engine (PyTorch at --precision, then the run exported to CTranslate2 at each
--export quantization, into a temporary folder), batched sentences/s, target tokens/s and BLEU on the same
sentences with the same threads; the model is named by its checkpoint sha256 and training updates. --limit caps
the sentences of the slow one-at-a-time measurement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import sacrebleu
import torch

from benchmarks.common import (
    add_device,
    add_out_dir,
    add_threads,
    begin,
    command_line,
    device_tag,
    peak_rss_mb,
    prog,
    run_name,
    timed,
    write_result,
)
from nmt.cli import Parser, command, number
from nmt.config import AT_LEAST_ONE, NON_NEGATIVE, decode_with
from nmt.evaluation import split_pair
from nmt.translator import Translator, load_translator

MODULE = "benchmarks.decode"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run folder or checkpoint file")
    parser.add_argument("--split", default="test", help="split of the run's dataset (default: test)")
    parser.add_argument("--limit", type=number(NON_NEGATIVE, integer=True), default=200,
                        help="sentences decoded one at a time (default 200; 0: all)")
    parser.add_argument("--batched-limit", type=number(NON_NEGATIVE, integer=True), default=0,
                        help="sentences decoded in batches (0: all)")
    parser.add_argument("--beam", type=number(AT_LEAST_ONE, integer=True), default=5,
                        help="beam size of the beam-search runs (default 5)")
    parser.add_argument("--length-penalty", type=number(NON_NEGATIVE), default=None,
                        help="GNMT length penalty of every engine (default: the one stored with the run)")
    add_device(parser)
    add_threads(parser, "CPU threads of every engine (default: torch's choice)")
    parser.add_argument("--export", nargs="*", metavar="QUANTIZATION",
                        help="also decode with CTranslate2 exports at these quantizations (no value: float32 int8)")
    parser.add_argument("--repeats", type=number(AT_LEAST_ONE, integer=True), default=1,
                        help="batched passes per engine and search; the median time is kept (default 1)")
    add_out_dir(parser)
    return parser.parse_args(argv)


def _measure(translator: Translator, lines: list[str], refs: list[str], beam: int, batch_tokens: int,
             repeats: int = 1) -> dict[str, float]:
    """Time decoding passes over `lines` (after a short warm-up; the median of `repeats`) and score the output."""
    t = translator.with_decode(decode_with(translator.decode, {"beam": beam, "n_best": 1,
                                                               "batch_tokens": batch_tokens}))
    t.search(lines[:2])  # warm-up: first-call allocations
    passes = [timed(lambda: t.search(lines), t.engine.device) for _ in range(repeats)]
    nbest = passes[-1][0]
    seconds = statistics.median(s for _, s in passes)
    tokens = sum(len(n[0].tokens) + 1 for n in nbest if n)
    hyps = [t.detokenize(n[0]) if n else "" for n in nbest]
    return {"sentences": len(lines), "seconds": round(seconds, 3),
            "sentences_per_s": round(len(lines) / seconds, 2), "tgt_tokens_per_s": round(tokens / seconds, 1),
            "bleu": round(sacrebleu.corpus_bleu(hyps, [[t.normalize(r) for r in refs]]).score, 2)}


def _engines(args: argparse.Namespace, device: torch.device, pytorch: Translator,
             folder: Path) -> dict[str, Translator]:
    from nmt.export import export_ctranslate2

    engines = {f"pytorch {args.precision}": pytorch}
    for quantization in args.export or ("float32", "int8"):
        out = folder / quantization
        export_ctranslate2(args.run, out, quantization)
        engines[f"ctranslate2 {quantization}"] = load_translator([out], device,
                                                                  changes={"length_penalty": args.length_penalty})
    return engines


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    pytorch = load_translator([args.run], device, args.precision, {"length_penalty": args.length_penalty},
                              label=lambda key: "--" + key.replace("_", "-"))
    sources, refs = split_pair(pytorch, args.split)
    first = Path(pytorch.members[0].path)
    run = run_name(first, pytorch.cfg.name)
    budget = pytorch.decode.batch_tokens
    searches = {"greedy": 1, f"beam{args.beam}": args.beam}
    one = slice(0, args.limit or None)
    many = slice(0, args.batched_limit or None)
    results: dict[str, dict] = {}
    for name, beam in searches.items():
        single = _measure(pytorch, sources[one], refs[one], beam, 1)  # a budget of 1: every batch one sentence
        batched = _measure(pytorch, sources[many], refs[many], beam, budget, args.repeats)
        results[name] = {"beam": beam, "one_at_a_time": single, "batched": batched,
                         "speedup": round(batched["sentences_per_s"] / single["sentences_per_s"], 2)}
        print(f"{run} {name}: one at a time {single['sentences_per_s']:.1f} sent/s "
              f"({single['tgt_tokens_per_s']:.0f} tok/s), batched {batched['sentences_per_s']:.1f} sent/s "
              f"({batched['tgt_tokens_per_s']:.0f} tok/s), speed-up x{results[name]['speedup']:.1f}")
    member = pytorch.members[0]
    result = {"benchmark": "decode", "run": run, "checkpoint": str(first), "checkpoint_sha256": member.sha256,
              "updates": member.steps, "arch": pytorch.cfg.model.arch, "split": args.split,
              "device": device_tag(device), "precision": args.precision, "threads": torch.get_num_threads(),
              "batch_tokens": budget, "length_penalty": pytorch.decode.alpha, "stop": pytorch.decode.stop,
              "repeats": args.repeats, "searches": results}
    if args.export is not None:  # given, with or without quantizations
        engines: dict[str, dict] = {}
        with tempfile.TemporaryDirectory(prefix="bench_decode.") as folder:
            for engine, translator in _engines(args, device, pytorch, Path(folder)).items():
                engines[engine] = {name: _measure(translator, sources[many], refs[many], beam, budget, args.repeats)
                                   for name, beam in searches.items()}
                print(f"{run} {engine}: " + ", ".join(
                    f"{name} {m['sentences_per_s']:.1f} sent/s BLEU {m['bleu']:.2f}"
                    for name, m in engines[engine].items()))
        result["engines"] = engines
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    if device.type == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    suffix = "" if args.length_penalty is None else f"_lp{args.length_penalty:g}"
    out = args.out_dir / f"decode_{run}_{device_tag(device, args.precision)}{suffix}.json"
    write_result(out, device, command_line(MODULE, argv), result)
    print(f"peak RSS {result['peak_rss_mb']:.0f} MB -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
