"""Where batched decoding's time goes, and the most it could give with its outputs unchanged bit for bit.

Usage: python -m benchmarks.decode_profile RUN [--split test] [--limit N] [--beam 5] [--workers N] [--peers JSON]

Decodes the run's split (already tokenized) greedily and with beam search in the batches the PyTorch engine makes
(length-sorted under decode.batch_tokens), each batch on one thread as each of the engine's side-by-side workers
runs it: timed, then again under torch.profiler. Each top-level operator's time, its callees' included, goes into
one part, and what no operator accounts for (Python, dispatch, the search's bookkeeping) into another:
- the output arithmetic: matmuls, the attention kernel, softmax, layer norm and element-wise arithmetic, the
  operations whose floating-point results are the tokens and scores. Another kernel, shape or thread count for
  one of them can change the scores' bits (the batch's rows, its padding, the threads of a matmul, a strided
  operand: two are counted below), so code that keeps its outputs runs these as they are;
- everything else: moving rows and caches (index_select, cat, copy, embedding lookups), choosing the best tokens
  (top-k, maxima), other operators and the time outside operators, which faster code could shrink.
The ceiling: W workers (--workers; default the engine's count, one per torch thread, as many as there are
batches at most) each decode whole batches one after the other, so none ends before max(total / W, the longest
batch, the sum of the ceil(n / W) shortest of n batches) of their output-arithmetic times; the split's sentences
over that is the most any code with these outputs decodes per second here, even if everything else cost nothing
and batches side by side ran as fast as alone. Each search also runs in batches of half the source tokens, and
with two threads per batch (torch then splits each operator), and counts the sentences that keep their tokens
and, bit for bit, their scores and log-probabilities. --peers names a peers_decode JSON of the same model: fairseq's
sentences/s there turn the ceiling into a multiple of fairseq-generate's speed, and its MFU into the MFU the
ceiling would reach (the same FLOPs per sentence, the same matmul peak). Writes
benchmarks/results/decode_profile_<run>_cpu.json.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.common import (
    add_beam,
    add_split,
    begin,
    blamed,
    finish,
    finite,
    markdown_row,
    measurement_parser,
    read_json,
    run_name,
    table_header,
)
from nmt.cli import command, number
from nmt.config import AT_LEAST_ONE, NON_NEGATIVE, decode_with
from nmt.engines.pytorch import batches_by_tokens, side_by_side, torch_threads
from nmt.errors import FileError
from nmt.evaluation import split_pair
from nmt.loader import load_translator

MODULE = "benchmarks.decode_profile"
# part -> the top-level operators it holds; the output arithmetic first, then what other code could do faster
ARITHMETIC: dict[str, frozenset[str]] = {
    "matmuls": frozenset({"aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}),
    "attention kernel": frozenset({"aten::scaled_dot_product_attention"}),
    "recurrent cells": frozenset({"aten::gru", "aten::gru_cell", "aten::lstm", "aten::lstm_cell", "aten::rnn_tanh"}),
    "softmax": frozenset({"aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"}),
    "layer norm": frozenset({"aten::layer_norm", "aten::native_layer_norm"}),
    "element-wise arithmetic": frozenset({
        "aten::add", "aten::add_", "aten::sub", "aten::mul", "aten::mul_", "aten::div", "aten::relu", "aten::relu_",
        "aten::gelu", "aten::silu", "aten::tanh", "aten::sigmoid", "aten::exp", "aten::masked_fill"}),
}
MOVABLE: dict[str, frozenset[str]] = {
    "rows and caches": frozenset({
        "aten::index_select", "aten::index", "aten::cat", "aten::copy_", "aten::embedding", "aten::gather",
        "aten::stack", "aten::clone", "aten::contiguous", "aten::index_copy", "aten::repeat_interleave"}),
    "choosing tokens": frozenset({"aten::topk", "aten::amax", "aten::argmax", "aten::max", "aten::sort"}),
}
OTHER, OUTSIDE = "other operators", "outside operators (Python, dispatch)"
BATCH = "nmt-batch-"  # the profiler range around a batch's decoding: BATCH and its index
PARTS = [*ARITHMETIC, *MOVABLE, OTHER, OUTSIDE]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__, threads="torch's CPU threads, which set the default --workers "
                                                         "(default: torch's choice)")
    parser.add_argument("run", help="run folder or checkpoint file")
    add_split(parser)
    parser.add_argument("--limit", type=number(NON_NEGATIVE, integer=True), default=0,
                        help="the split's first N sentences only (default 0: all)")
    add_beam(parser, "beam size of the beam search (default 5)")
    parser.add_argument("--workers", type=number(AT_LEAST_ONE, integer=True), default=None,
                        help="batches decoded side by side in the ceiling (default: as the engine would)")
    parser.add_argument("--peers", type=Path, default=None,
                        help="a peers_decode JSON of the same model: the ceiling as a multiple of fairseq's speed")
    args = parser.parse_args(argv)
    if args.device not in ("auto", "cpu"):
        parser.error("--device: the profile is of CPU decoding (leave it out or give cpu)")
    return args


def part_of(name: str) -> str:
    """The part a top-level operator's time goes into."""
    for part, names in (ARITHMETIC | MOVABLE).items():
        if name in names:
            return part
    return OTHER


def parts_by_batch(events: list[Any], walls: list[float]) -> list[dict[str, float]]:
    """Seconds per part of each profiled batch (`walls`: their times, each under a BATCH range): each top-level
    operator (no operator above it) with its callees; the rest of a batch's time is outside operators."""
    found = [dict.fromkeys(PARTS, 0.0) for _ in walls]
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith(("aten::", BATCH)):
            parent = parent.cpu_parent
        if parent is not None and parent.name.startswith(BATCH):
            found[int(parent.name[len(BATCH):])][part_of(event.name)] += event.cpu_time_total / 1e6
    for seconds, wall in zip(found, walls, strict=True):
        seconds[OUTSIDE] = max(0.0, wall - sum(seconds.values()))
    return found


def arithmetic_share(parts: dict[str, float]) -> float:
    """The output arithmetic's seconds of a part breakdown."""
    return sum(parts[part] for part in ARITHMETIC)


def makespan_floor(times: list[float], workers: int) -> float:
    """The earliest `workers` workers can end `times` (whole jobs, each on one worker): the mean load, the longest
    job, and the ceil(n / workers) shortest jobs, which the busiest worker runs at least."""
    if not times:
        return 0.0
    most = math.ceil(len(times) / workers)
    return max(sum(times) / workers, max(times), sum(sorted(times)[:most]))


def profile_search(engine: Any, ids: list[np.ndarray], batches: list[list[int]], cfg: Any, workers: int,
                   whole: list[list[Any]]) -> dict[str, Any]:
    """One search over every batch: timed, then profiled; the parts, the ceiling, and whether batch by batch it
    gave `whole`, the whole split's hypotheses decoded at once."""
    sources = [[ids[i] for i in batch] for batch in batches]
    seconds, same = [], True
    for batch, inputs in zip(batches, sources, strict=True):
        start = time.perf_counter()
        nbest = engine.search(inputs, cfg)
        seconds.append(time.perf_counter() - start)
        same &= all(_best(a) == _best(whole[i]) for a, i in zip(nbest, batch, strict=True))
    walls = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for index, inputs in enumerate(sources):
            with record_function(f"{BATCH}{index}"):
                start = time.perf_counter()
                engine.search(inputs, cfg)
                walls.append(time.perf_counter() - start)
    found = parts_by_batch(list(prof.events()), walls)
    parts = {part: sum(batch[part] for batch in found) for part in PARTS}
    rows = [{"sentences": len(inputs), "longest_source": max(len(s) for s in inputs) + 1, "seconds": round(took, 4),
             "profiled_seconds": round(wall, 4), "arithmetic_seconds": round(arithmetic_share(batch), 4)}
            for inputs, took, wall, batch in zip(sources, seconds, walls, found, strict=True)]
    sentences, total, profiled = sum(len(batch) for batch in batches), sum(seconds), sum(walls)
    floor = makespan_floor([row["arithmetic_seconds"] for row in rows], workers)
    return {"beam": cfg.beam, "sentences": sentences, "batches": rows, "same_as_whole_split": same,
            "seconds": round(total, 3), "sentences_per_s": round(sentences / total, 2),
            "profiled_seconds": round(profiled, 3), "parts": {k: round(v, 4) for k, v in parts.items()},
            "arithmetic_share": round(arithmetic_share(parts) / profiled, 4), "workers": workers,
            "ceiling_seconds": round(floor, 3), "ceiling_sentences_per_s": round(sentences / floor, 2)}


def _best(nbest: list[Any]) -> tuple[list[int], float, float] | None:
    """A sentence's best hypothesis as its tokens, score and log-probability (None: none)."""
    return (list(nbest[0].tokens), nbest[0].score, nbest[0].log_prob) if nbest else None


def bit_checks(engine: Any, ids: list[np.ndarray], batches: list[list[int]], cfg: Any,
               whole: list[list[Any]]) -> dict[str, dict[str, int]]:
    """How many sentences keep `whole`'s tokens, and its scores bit for bit, when the same search runs in batches of
    half the source tokens, or on two threads per batch (each batch alone, so torch splits its operators)."""
    half = engine.search(ids, decode_with(cfg, {"batch_tokens": max(1, cfg.batch_tokens // 2)}))
    two = list(whole)
    with torch_threads(2):
        for batch in batches:
            for i, nbest in zip(batch, engine.search([ids[i] for i in batch], cfg), strict=True):
                two[i] = nbest
    return {name: {"same_tokens": sum(_tokens(a) == _tokens(b) for a, b in zip(found, whole, strict=True)),
                   "same_scores": sum(_best(a) == _best(b) for a, b in zip(found, whole, strict=True))}
            for name, found in (("half_batches", half), ("two_threads_per_batch", two))}


def _tokens(nbest: list[Any]) -> list[int] | None:
    """A sentence's best tokens (None: no hypothesis)."""
    return list(nbest[0].tokens) if nbest else None


def read_peers(path: Path, sha256: str, searches: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per search (name -> beam), the figures of the peers_decode JSON at `path` the ceiling is set against:
    fairseq's and our sentences/s, their ratio and our MFU. Read before decoding, so a file that cannot serve (not
    such a record, another model, a field missing or not a positive speed) stops the run at once."""
    peers = read_json(path)
    if peers.get("benchmark") != "peers_decode":
        raise FileError(f"--peers {path}: not a peers_decode record (python -m benchmarks.peers --decode writes one)")
    if peers.get("checkpoint_sha256") != sha256:
        raise FileError(f"--peers {path}: measured another model (sha256 {str(peers.get('checkpoint_sha256'))[:12]}, "
                        f"not {sha256[:12]})")
    found = {}
    with blamed(path):  # a missing or mistyped field names the file
        for name, beam in searches.items():
            key = "greedy" if beam == 1 else f"beam{beam}"
            found[name] = {"fairseq_sentences_per_s": _speed(peers["fairseq"][key], f"fairseq {key}"),
                           "nmt_sentences_per_s": _speed(peers["nmt"][key], f"nmt {key}"),
                           "reached_x_fairseq": finite(peers["ratio"][key], f"ratio {key}"),
                           "reached_mfu": finite(peers["nmt"][key]["mfu"], f"nmt {key} mfu")}
    return found


def against_peers(peers: dict[str, dict[str, float]], searches: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`read_peers`' figures with each search's ceiling as a multiple of fairseq-generate's sentences/s and as the
    MFU it would reach (the same FLOPs per sentence over the same peak: MFU scales with the speed)."""
    found = {}
    for name, p in peers.items():
        ceiling = searches[name]["ceiling_sentences_per_s"]
        found[name] = {**p, "ceiling_x_fairseq": round(ceiling / p["fairseq_sentences_per_s"], 2),
                       "ceiling_mfu": round(p["reached_mfu"] * ceiling / p["nmt_sentences_per_s"], 4)}
    return found


def _speed(figures: dict[str, Any], name: str) -> float:
    """A record's sentences/s, which must be a positive number."""
    value = finite(figures["sentences_per_s"], f"{name} sentences_per_s")
    if value <= 0:
        raise ValueError(f"{name} sentences_per_s is {value}, not a positive speed")
    return value


def markdown_table(record: dict[str, Any]) -> str:
    """Seconds per part of each search (the parts no search spent time in left out), the output arithmetic
    marked."""
    searches = record["searches"]
    rows = table_header(["part", *(f"{name} s" for name in searches), *(f"{name} share" for name in searches)],
                        "l" + "r" * 2 * len(searches))
    for part in (p for p in PARTS if any(s["parts"][p] > 0 for s in searches.values())):
        label = f"{part} (output arithmetic)" if part in ARITHMETIC else part
        rows.append(markdown_row([label, *(f"{s['parts'][part]:.3f}" for s in searches.values()),
                                  *(f"{100 * s['parts'][part] / s['profiled_seconds']:.1f}%"
                                    for s in searches.values())]))
    return "\n".join(rows)


def ceiling_lines(record: dict[str, Any]) -> list[str]:
    """Per search: measured speed on one thread and the best schedule of its batch times on the workers, the ceiling
    (against fairseq when the record has it), and how many sentences kept their outputs with batches half as large
    and with two threads per batch."""
    peers = record.get("peers", {}).get("searches", {})
    lines = []
    for name, s in record["searches"].items():
        scheduled = s["sentences"] / makespan_floor([batch["seconds"] for batch in s["batches"]], s["workers"])
        line = (f"- {name}: {s['sentences']:,} sentences in {len(s['batches'])} batches, {s['sentences_per_s']:.1f} "
                f"sent/s on one thread, at most {scheduled:.1f} with these batch times on {s['workers']} workers; "
                f"output arithmetic {100 * s['arithmetic_share']:.1f}% of the profiled time; "
                f"ceiling with {s['workers']} workers {s['ceiling_sentences_per_s']:.1f} sent/s")
        if name in peers:
            p = peers[name]
            line += (f" = x{p['ceiling_x_fairseq']:.2f} fairseq-generate's {p['fairseq_sentences_per_s']:.1f}, MFU "
                     f"{100 * p['ceiling_mfu']:.1f}% (reached in `{record['peers']['file']}`: "
                     f"{p['nmt_sentences_per_s']:.1f} sent/s, x{p['reached_x_fairseq']:.2f}, MFU "
                     f"{100 * p['reached_mfu']:.1f}%)")
        half, two = s["bits"]["half_batches"], s["bits"]["two_threads_per_batch"]
        lines.append(f"{line}. Scores kept bit for bit (tokens kept): {half['same_scores']:,} ({half['same_tokens']:,})"
                     f" with batches half as large, {two['same_scores']:,} ({two['same_tokens']:,}) with two threads "
                     "per batch")
    return lines


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, _ = begin(argv, parse_args)
    device = torch.device("cpu")  # parse_args allows no other
    translator = load_translator([args.run], device)
    sources, _ = split_pair(translator.cfg, args.split)
    sources = sources[:args.limit or None]
    ids = translator.encode(sources)
    batches = batches_by_tokens([len(s) for s in ids], translator.decode.batch_tokens)
    workers = args.workers or side_by_side(device, len(batches))
    engine = translator.engine
    member = translator.members[0]
    beams = {"greedy": 1, f"beam{args.beam}": args.beam}
    peers = None if args.peers is None else read_peers(args.peers, member.sha256, beams)
    torch.set_num_threads(1)  # as each side-by-side worker decodes
    searches = {}
    for name, beam in beams.items():
        cfg = decode_with(translator.decode, {"beam": beam, "n_best": 1})
        engine.search(ids[:2], cfg)  # warm-up: first-call allocations
        whole = engine.search(ids, cfg)
        searches[name] = {**profile_search(engine, ids, batches, cfg, workers, whole),
                          "bits": bit_checks(engine, ids, batches, cfg, whole)}
    record = {"benchmark": "decode_profile", "run": run_name(Path(member.path), translator.cfg.name),
              "checkpoint": str(member.path), "checkpoint_sha256": member.sha256, "updates": member.steps,
              "arch": translator.cfg.model.arch, "split": args.split, "limit": args.limit,
              "batch_tokens": translator.decode.batch_tokens, "length_penalty": translator.decode.alpha,
              "threads_per_batch": 1, "searches": searches}
    if peers is not None:
        record["peers"] = {"file": args.peers.name, "searches": against_peers(peers, searches)}
    print(markdown_table(record))
    print("\n".join(ceiling_lines(record)))
    return finish(args.out_dir / f"decode_profile_{record['run']}_cpu.json", device, MODULE, argv, record)


if __name__ == "__main__":
    sys.exit(main())
