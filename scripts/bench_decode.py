"""Decoding speed of a trained run: greedy and beam search, one sentence at a time and batched.

Usage: python scripts/bench_decode.py RUN [--split test] [--limit N] [--beam 5] [--device auto] [--precision fp32]

Translates the run's split sources (as nmt-evaluate reads them) and writes
benchmarks/results/decode_<run name>_<device>.json with sentences/s and target tokens/s (EOS included) per
search and batching, the speed-up of batched (decode.batch_tokens source tokens per batch) over one at a time,
and the peak RSS. --limit caps the sentences of the slow one-at-a-time measurement.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from nmt.checkpoint import Loaded, load_model
from nmt.cli import _device, command
from nmt.config import ConfigError
from nmt.data import read_pair, resolve_files
from nmt.decode import translate_ids
from nmt.flops import command_line, device_tag, peak_rss_mb, write_result

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
MAX_SOURCE_TOKENS = 250  # what nmt-evaluate truncates to


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_decode.py", description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run folder or checkpoint file")
    parser.add_argument("--split", default="test", help="split of the run's dataset (default: test)")
    parser.add_argument("--limit", type=int, default=200,
                        help="sentences decoded one at a time (default 200; 0: all)")
    parser.add_argument("--batched-limit", type=int, default=0, help="sentences decoded in batches (0: all)")
    parser.add_argument("--beam", type=int, default=5, help="beam size of the beam-search runs (default 5)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the JSON goes")
    return parser.parse_args(argv)


def _sources(loaded: Loaded, split: str) -> list[np.ndarray]:
    files = resolve_files(loaded.cfg, log=lambda _msg: None)
    if split not in files:
        raise ConfigError(f"--split {split}: the run's dataset has splits {', '.join(files)}")
    sources, _ = read_pair(*files[split])
    return [np.asarray(ids[:MAX_SOURCE_TOKENS], dtype=np.int64) for ids in loaded.tokenizer.encode_src(sources)]


def _measure(loaded: Loaded, sources: list[np.ndarray], beam: int, batch_tokens: int, device: torch.device,
             precision: str) -> dict[str, float]:
    """Time one decoding pass over `sources`."""
    cfg = replace(loaded.cfg.decode, beam=beam, n_best=1, batch_tokens=batch_tokens)
    translate_ids(loaded.model, sources[:2], cfg, device, precision)  # warm-up: first-call allocations
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    nbest = translate_ids(loaded.model, sources, cfg, device, precision)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    tokens = sum(len(n[0].tokens) + 1 for n in nbest if n)
    return {"sentences": len(sources), "seconds": round(seconds, 3),
            "sentences_per_s": round(len(sources) / seconds, 2), "tgt_tokens_per_s": round(tokens / seconds, 1)}


@command
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = _device(args.device)
    loaded = load_model(args.run, device)
    sources = _sources(loaded, args.split)
    run_name = loaded.path.parent.parent.name if loaded.path.parent.name == "checkpoints" else loaded.cfg.name
    budget = loaded.cfg.decode.batch_tokens
    searches = {"greedy": 1, f"beam{args.beam}": args.beam}
    one = sources[:args.limit] if args.limit else sources
    many = sources[:args.batched_limit] if args.batched_limit else sources
    results: dict[str, dict] = {}
    for name, beam in searches.items():
        single = _measure(loaded, one, beam, 1, device, args.precision)  # a budget of 1 makes every batch one sentence
        batched = _measure(loaded, many, beam, budget, device, args.precision)
        results[name] = {"beam": beam, "one_at_a_time": single, "batched": batched,
                         "speedup": round(batched["sentences_per_s"] / single["sentences_per_s"], 2)}
        print(f"{run_name} {name}: one at a time {single['sentences_per_s']:.1f} sent/s "
              f"({single['tgt_tokens_per_s']:.0f} tok/s), batched {batched['sentences_per_s']:.1f} sent/s "
              f"({batched['tgt_tokens_per_s']:.0f} tok/s), speed-up x{results[name]['speedup']:.1f}")
    result = {"benchmark": "decode", "run": run_name, "checkpoint": str(loaded.path), "arch": loaded.cfg.model.arch,
              "split": args.split, "device": device_tag(device), "precision": args.precision,
              "threads": torch.get_num_threads(), "batch_tokens": budget, "searches": results,
              "peak_rss_mb": round(peak_rss_mb(), 1)}
    if device.type == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    out = args.out_dir / f"decode_{run_name}_{device_tag(device, args.precision)}.json"
    write_result(out, device, command_line(__file__, argv), result)
    print(f"peak RSS {result['peak_rss_mb']:.0f} MB -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
