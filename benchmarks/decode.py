"""Decoding speed of a trained run: greedy, beam and sampling, PyTorch and its CTranslate2 exports, with BLEU.

Usage: python -m benchmarks.decode RUN [--split test] [--limit N] [--beam 5] [--sampling [--top-p 1.0]]
       [--device auto] [--threads N] [--ensemble MODEL ...] [--glossary FILE]
       [--export float32 int8 | --export | --against TREE]

Translates the run's split (as nmt-evaluate reads it, through the same Translator) and writes
benchmarks/results/decode_<run name>_<device>.json with, per search (greedy and beam, and with --sampling a third:
`sampling`, or `sampling_p<P>` at a --top-p P below 1, beam 1 with the decode settings sampling, seed 1 and top_p,
what sampled synthetic translation such as back-translation costs; the JSON's name then ends in _sampling), its
decode settings, sentences/s and target tokens/s (EOS included) of the PyTorch model one sentence at a time and
batched (decode.batch_tokens source tokens per batch), and, per engine (PyTorch at --precision, then the run
exported to CTranslate2 at each --export quantization, into a temporary folder; CTranslate2 does not sample, so
its rows leave sampling out), batched sentences/s, target tokens/s and BLEU on the same sentences with the same
threads; the model is named by its checkpoint sha256 and training updates. --limit caps the sentences of the slow
one-at-a-time measurement. Every measurement has its decoding MFU: the model's FLOPs for what it decoded
(`nmt.flops.decoding_flops`: per sentence, the encoder once and each step's decoder for `beam` rows, for as many
steps as its best hypothesis took; a sample costs what greedy search does) per second, over the peak of a large
square matmul measured after decoding on the same device, at --precision, with the same threads
(`matmul_peak_tflops`).

--against TREE times another checkout's code (a git worktree of an older commit, say) beside this one's: each in a
fresh interpreter (benchmarks/decode_worker.py), given the same sentences, pass after pass in alternating order
(--repeats passes each, the median kept), so that a busy machine slows both alike. It writes
decode_<run name>_<device>_against_<its commit>.json with both sides' figures, this side's speed-up over TREE's in
wall-clock time and in CPU time (`cpu_speedup`: the process's CPU seconds, which another program's share of a
busy machine does not inflate), and whether the two gave the same tokens (`identical`) and the same scores and
log-probabilities, bit for bit (`identical_scores`), for every sentence. It refuses --sampling: the other
checkout may not sample.

--ensemble decodes RUN together with further models as one ensemble; --glossary searches every sentence for the
target terms a glossary file calls for in it (constrained beam search; with --against, each checkout matches the
glossary with its own code; --sampling refuses it, a sample is not a search). Either adds a suffix to the JSON's
name (_ensembleN, _glossary). An ensemble's FLOPs are each member's, as `nmt.flops.decoding_flops` counts them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from benchmarks.common import (
    ROOT,
    add_beam,
    add_split,
    begin,
    checkout,
    device_tag,
    finish,
    matmul_peak,
    matmul_size,
    measurement_parser,
    peak_rss_mb,
    run_name,
    timed,
)
from nmt.cli import command, number
from nmt.config import AT_LEAST_ONE, NON_NEGATIVE, DecodeConfig, decode_with
from nmt.errors import FileError
from nmt.evaluation import split_pair
from nmt.flops import decoding_flops
from nmt.glossary import line_terms
from nmt.loader import load_translator
from nmt.translator import Translator

MODULE = "benchmarks.decode"
WORKER = Path(__file__).with_name("decode_worker.py")
SAMPLING_SEED = 1  # the seed of the sampling search, fixed so that its outputs repeat
TOP_P = next(f for f in dataclasses.fields(DecodeConfig) if f.name == "top_p")  # the library's default and range


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__, precision=True,
                                threads="CPU threads of every engine (default: torch's choice)")
    parser.add_argument("run", help="run folder or checkpoint file")
    add_split(parser)
    parser.add_argument("--limit", type=number(NON_NEGATIVE, integer=True), default=200,
                        help="sentences decoded one at a time (default 200; 0: all)")
    parser.add_argument("--batched-limit", type=number(NON_NEGATIVE, integer=True), default=0,
                        help="sentences decoded in batches (0: all)")
    add_beam(parser, "beam size of the beam-search runs (default 5)")
    parser.add_argument("--sampling", action="store_true",
                        help=f"also time sampling (beam 1, seed {SAMPLING_SEED}), as back-translation decodes")
    parser.add_argument("--top-p", type=number(TOP_P.metadata["bounds"]), default=TOP_P.default,
                        help=f"nucleus of the sampling search (default {TOP_P.default:g}: all subwords)")
    parser.add_argument("--length-penalty", type=number(NON_NEGATIVE), default=None,
                        help="GNMT length penalty of every engine (default: the one stored with the run)")
    parser.add_argument("--export", nargs="*", metavar="QUANTIZATION",
                        help="also decode with CTranslate2 exports at these quantizations (no value: float32 int8)")
    parser.add_argument("--ensemble", nargs="+", metavar="MODEL", default=[],
                        help="further run folders or checkpoints decoded with RUN as one ensemble")
    parser.add_argument("--glossary", metavar="FILE",
                        help="a glossary (TSV or CSV) whose terms the translations must contain")
    parser.add_argument("--against", metavar="TREE",
                        help="time the code of the checkout TREE beside this one's, pass for pass (see above)")
    parser.add_argument("--repeats", type=number(AT_LEAST_ONE, integer=True), default=1,
                        help="batched passes per engine and search (with --against: every measurement's passes "
                             "per checkout); the median time is kept (default 1)")
    parser.add_argument("--peak-seconds", type=number(NON_NEGATIVE), default=3.0,
                        help="seconds of the matmul peak measurement the MFU is taken against (default 3)")
    args = parser.parse_args(argv)
    if args.export is not None and (args.against is not None or args.ensemble or args.glossary):
        parser.error("--export times RUN alone without a glossary: with --against, --ensemble or --glossary leave "
                     "out --export")
    if args.sampling and args.against is not None:
        parser.error("--against times searches both checkouts have: leave out --sampling (the other may not sample)")
    if args.sampling and args.glossary:
        parser.error("--glossary needs beam search: leave out --sampling")
    if args.top_p != TOP_P.default and not args.sampling:
        parser.error("--top-p shapes the sampling search: add --sampling")
    return args


def _searches(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The searches timed, by name, each with the decode settings it changes: greedy, beam and with --sampling
    sampling."""
    found: dict[str, dict[str, Any]] = {"greedy": {"beam": 1}, f"beam{args.beam}": {"beam": args.beam}}
    if args.sampling:
        name = "sampling" if args.top_p == TOP_P.default else f"sampling_p{args.top_p:g}"
        found[name] = {"beam": 1, "sampling": True, "seed": SAMPLING_SEED, "top_p": args.top_p}
    return found


def _measure(translator: Translator, lines: list[str], refs: list[str], settings: dict[str, Any],
             batch_tokens: int, repeats: int = 1, glossary: str | None = None) -> dict[str, float]:
    """Time decoding passes over `lines` with the decode `settings` of a search (after a short warm-up; the median of
    `repeats`) and score the output."""
    t = translator.with_decode(decode_with(translator.decode, {**settings, "n_best": 1,
                                                               "batch_tokens": batch_tokens}))
    terms = None if glossary is None else line_terms(lines, glossary)
    t.hypotheses(lines[:2], terms=None if terms is None else terms[:2])  # warm-up: first-call allocations
    passes = [timed(lambda: t.hypotheses(lines, terms=terms), t.engine.device) for _ in range(repeats)]
    nbest = passes[-1][0]
    best = [list(n[0].tokens) if n else None for n in nbest]
    hyps = [t.detokenize(n[0]) if n else "" for n in nbest]
    return _figures(statistics.median(s for _, s in passes), best, hyps, [t.normalize(r) for r in refs],
                    _flops(t, lines, best, settings["beam"]))


def _flops(translator: Translator, lines: list[str], best: list[list[int] | None], beam: int) -> float:
    """The model's FLOPs for decoding `lines` into `best` (each line's best token ids; None: no output):
    `nmt.flops.decoding_flops` of each sentence with `beam` rows for as many steps as its best hypothesis took (for a
    beam an estimate: its hypotheses end at other steps, and its first step runs one row), once per member of an
    ensemble (each counted as the first)."""
    cfg, vocab = translator.cfg.model, translator.tokenizer.vocab.tgt_size
    return len(translator.members) * sum(
        decoding_flops(cfg, vocab, len(src) + 1, len(ids) + 1, beam)
        for src, ids in zip(translator.encode(lines), best, strict=True) if ids is not None)


def _figures(seconds: float, best: list[list[int] | None], hyps: list[str], refs: list[str],
             flops: float) -> dict[str, float]:
    """Speed, model FLOP/s and BLEU of a measurement: `best` each sentence's output tokens (EOS not included; None:
    none), `refs` normalized as the model reads, `flops` what decoding them cost (`_flops`)."""
    tokens = sum(len(ids) + 1 for ids in best if ids is not None)
    return {"sentences": len(hyps), "seconds": round(seconds, 3), "sentences_per_s": round(len(hyps) / seconds, 2),
            "tgt_tokens_per_s": round(tokens / seconds, 1), "model_gflops_per_s": round(flops / seconds / 1e9, 3),
            "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)}


def _peak(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The matmul peak at --precision on `device`, measured now, for the JSON."""
    size = matmul_size(device)
    return {"matmul_size": size, "matmul_peak_tflops": {
        args.precision: round(matmul_peak(device, args.precision, size, args.peak_seconds) / 1e12, 4)}}


def _print_mfu(peak: dict[str, Any], precision: str, batched: dict[str, dict[str, Any]]) -> None:
    print(f"matmul peak {peak['matmul_peak_tflops'][precision]:.3f} TFLOP/s; batched decoding MFU: "
          + ", ".join(f"{name} {100 * m['mfu']:.2f}%" for name, m in batched.items()))


def _add_mfu(figures: dict[str, Any], peak: dict[str, Any], precision: str) -> None:
    """A measurement's MFU: its model FLOP/s over the matmul peak."""
    figures["mfu"] = round(figures["model_gflops_per_s"] / 1e3 / peak["matmul_peak_tflops"][precision], 5)


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


class _Checkout:
    """One checkout's code decoding in a fresh interpreter (benchmarks/decode_worker.py), one pass per request."""

    def __init__(self, tree: Path, spec: dict[str, Any]) -> None:
        self.tree = tree
        self.process = subprocess.Popen([sys.executable, "-c", WORKER.read_text(encoding="utf-8"), json.dumps(spec)],
                                        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self._answer()
        except BaseException:  # refused or failed: the worker ends before the error goes on
            self.close()
            raise

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise FileError(f"decoding with the code of {self.tree} failed (exit status {self.process.wait()}; "
                            "its error is above)")
        answer = json.loads(line)
        if answer["strays"]:
            raise FileError(f"decoding with the code of {self.tree} loaded {answer['strays'][0]}, from outside it "
                            "(it lacks that module and an editable install of another checkout served it)")
        return answer

    def decode(self, lines: list[str], beam: int, batch_tokens: int, warm_up: bool) -> dict[str, Any]:
        """One timed pass: its seconds, each sentence's best token ids (None: no hypothesis) and text."""
        assert self.process.stdin is not None
        request = {"lines": lines, "beam": beam, "batch_tokens": batch_tokens, "warm_up": warm_up}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def _against(args: argparse.Namespace, device: torch.device, pytorch: Translator,
             searches: dict[str, dict[str, Any]], work: dict[str, tuple[list[str], list[str], int]]) -> dict[str, dict]:
    """This checkout and --against's decoding the same sentences, pass after pass in alternating order; per search
    and measurement (`work`: its sources, references and token budget), both sides' figures, this side's speed-up
    and whether every sentence's tokens, and its scores, were the same."""
    spec = {"models": [str(Path(model).resolve()) for model in (args.run, *args.ensemble)], "device": str(device),
            "precision": args.precision, "threads": args.threads, "length_penalty": args.length_penalty,
            "glossary": None if args.glossary is None else str(Path(args.glossary).resolve())}
    trees = {"this": ROOT, "against": Path(args.against).resolve()}
    checkouts: dict[str, _Checkout] = {}
    results: dict[str, dict] = {}
    try:
        for side in ("against", "this"):  # a checkout refused for its modules' origin is refused before this starts
            checkouts[side] = _Checkout(trees[side], spec)
        for name, settings in searches.items():  # beam settings only: the worker's requests name a beam
            beam = settings["beam"]
            results[name] = dict(settings)
            for measurement, (lines, refs, budget) in work.items():
                passes: dict[str, list[dict]] = {side: [] for side in trees}
                for repeat in range(args.repeats):
                    for side in (list(trees) if repeat % 2 == 0 else list(trees)[::-1]):
                        passes[side].append(checkouts[side].decode(lines, beam, budget, warm_up=repeat == 0))
                normalized = [pytorch.normalize(r) for r in refs]
                row: dict[str, Any] = {}
                for side, done in passes.items():
                    best = done[-1]["tokens"]
                    cpu = statistics.median(p["cpu_seconds"] for p in done)
                    row[side] = {**_figures(statistics.median(p["seconds"] for p in done), best, done[-1]["hyps"],
                                            normalized, _flops(pytorch, lines, best, beam)),
                                 "passes": [round(p["seconds"], 3) for p in done],
                                 "cpu_seconds": round(cpu, 3), "sentences_per_cpu_s": round(len(lines) / cpu, 2)}
                row["speedup"] = round(row["this"]["sentences_per_s"] / row["against"]["sentences_per_s"], 3)
                row["cpu_speedup"] = round(row["against"]["cpu_seconds"] / row["this"]["cpu_seconds"], 3)
                first = passes["this"][0]
                row["identical"] = all(p["tokens"] == first["tokens"] for done in passes.values() for p in done)
                row["identical_scores"] = all(p["scores"] == first["scores"] for done in passes.values() for p in done)
                results[name][measurement] = row
                print(f"{name} {measurement}: this {row['this']['sentences_per_s']:.2f} sent/s, against "
                      f"{row['against']['sentences_per_s']:.2f} sent/s, x{row['speedup']:.3f} (CPU time "
                      f"x{row['cpu_speedup']:.3f}), tokens " + ("identical" if row["identical"] else "DIFFERENT")
                      + ", scores " + ("identical" if row["identical_scores"] else "DIFFERENT"))
    finally:
        for running in checkouts.values():
            running.close()
    return {"trees": {side: checkout(tree) for side, tree in trees.items()}, "searches": results}


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    if args.against is not None and not (Path(args.against) / "nmt").is_dir():
        raise FileError(f"--against {args.against}: not a checkout of this project (it has no nmt/ folder)")
    pytorch = load_translator([args.run, *args.ensemble], device, args.precision,
                              {"length_penalty": args.length_penalty}, label=lambda key: "--" + key.replace("_", "-"))
    sources, refs = split_pair(pytorch.cfg, args.split)
    first = Path(pytorch.members[0].path)
    run = run_name(first, pytorch.cfg.name)
    budget = pytorch.decode.batch_tokens
    searches = _searches(args)
    one = slice(0, args.limit or None)
    many = slice(0, args.batched_limit or None)
    if args.against is not None:  # a budget of 1: every batch one sentence
        work = {"one_at_a_time": (sources[one], refs[one], 1), "batched": (sources[many], refs[many], budget)}
        return _main_against(argv, args, device, pytorch, searches, work)
    results: dict[str, dict] = {}
    for name, settings in searches.items():
        single = _measure(pytorch, sources[one], refs[one], settings, 1,  # a budget of 1: every batch one sentence
                          glossary=args.glossary)
        batched = _measure(pytorch, sources[many], refs[many], settings, budget, args.repeats, args.glossary)
        results[name] = {**settings, "one_at_a_time": single, "batched": batched,
                         "speedup": round(batched["sentences_per_s"] / single["sentences_per_s"], 2)}
        print(f"{run} {name}: one at a time {single['sentences_per_s']:.1f} sent/s "
              f"({single['tgt_tokens_per_s']:.0f} tok/s), batched {batched['sentences_per_s']:.1f} sent/s "
              f"({batched['tgt_tokens_per_s']:.0f} tok/s), speed-up x{results[name]['speedup']:.1f}")
    result = {**_record("decode", args, device, pytorch), "searches": results}
    if args.export is not None:  # given, with or without quantizations
        engines: dict[str, dict] = {}
        with tempfile.TemporaryDirectory(prefix="bench_decode.") as folder:
            for engine, translator in _engines(args, device, pytorch, Path(folder)).items():
                engines[engine] = {name: _measure(translator, sources[many], refs[many], settings, budget,
                                                  args.repeats)
                                   for name, settings in searches.items()
                                   if translator.engine.abilities.sampling or not settings.get("sampling")}
                print(f"{run} {engine}: " + ", ".join(
                    f"{name} {m['sentences_per_s']:.1f} sent/s BLEU {m['bleu']:.2f}"
                    for name, m in engines[engine].items()))
        result["engines"] = engines
    peak = _peak(args, device)
    measured = [m for search in results.values() for m in (search["one_at_a_time"], search["batched"])]
    for m in measured + [m for searches_done in result.get("engines", {}).values() for m in searches_done.values()]:
        _add_mfu(m, peak, args.precision)
    result.update(peak)
    _print_mfu(peak, args.precision, {name: search["batched"] for name, search in results.items()})
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    if device.type == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return finish(args.out_dir / f"{_stem(args, device, pytorch)}.json", device, MODULE, argv, result,
                  f"peak RSS {result['peak_rss_mb']:.0f} MB")


def _record(kind: str, args: argparse.Namespace, device: torch.device, pytorch: Translator) -> dict[str, Any]:
    """The JSON's first fields: the benchmark, the model and the settings it decoded with."""
    member, first = pytorch.members[0], Path(pytorch.members[0].path)
    return {"benchmark": kind, "run": run_name(first, pytorch.cfg.name), "checkpoint": str(first),
            "checkpoint_sha256": member.sha256, "updates": member.steps, "arch": pytorch.cfg.model.arch,
            "split": args.split, "device": device_tag(device), "precision": args.precision,
            "threads": torch.get_num_threads(), "batch_tokens": pytorch.decode.batch_tokens,
            "length_penalty": pytorch.decode.alpha, "stop": pytorch.decode.stop, "repeats": args.repeats,
            "members": [m.path for m in pytorch.members], "glossary": args.glossary}


def _stem(args: argparse.Namespace, device: torch.device, pytorch: Translator) -> str:
    """The JSON's file name without its suffix:
    decode_<run name>_<device>[_ensembleN][_glossary][_lp<penalty>][_sampling]."""
    run = run_name(Path(pytorch.members[0].path), pytorch.cfg.name)
    suffix = (f"_ensemble{len(pytorch.members)}" if len(pytorch.members) > 1 else "") + ("_glossary" if args.glossary
                                                                                       else "")
    suffix += "" if args.length_penalty is None else f"_lp{args.length_penalty:g}"
    suffix += "_sampling" if args.sampling else ""
    return f"decode_{run}_{device_tag(device, args.precision)}{suffix}"


def _main_against(argv: list[str], args: argparse.Namespace, device: torch.device, pytorch: Translator,
                  searches: dict[str, dict[str, Any]], work: dict[str, tuple[list[str], list[str], int]]) -> int:
    """--against: both checkouts timed, into decode_<run name>_<device>_against_<its commit>.json."""
    compared = _against(args, device, pytorch, searches, work)
    peak = _peak(args, device)
    for search in compared["searches"].values():
        for measurement in work:
            for side in ("this", "against"):
                _add_mfu(search[measurement][side], peak, args.precision)
    _print_mfu(peak, args.precision, {name: search["batched"]["this"] for name, search in compared["searches"].items()})
    against = compared["trees"]["against"]
    label = (against["commit"] or "")[:7] or Path(against["path"]).name
    result = {**_record("decode_against", args, device, pytorch), **compared, **peak}
    return finish(args.out_dir / f"{_stem(args, device, pytorch)}_against_{label}.json", device, MODULE, argv, result)


if __name__ == "__main__":
    sys.exit(main())
