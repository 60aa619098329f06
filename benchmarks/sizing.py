"""Sizing: training updates/s of a few Transformer sizes, for the table of model sizes against corpus sizes.

Usage: python -m benchmarks.sizing [--config CONFIG] [--sizes tiny small base] [--seconds N] [--set key=value ...]
       python -m benchmarks.sizing --report-only

For each size (a Transformer shape set over the config's model section), builds the trainer with
nmt.run.prepare_trainer on the config's data (prepared and cached as nmt-prepare does), runs warm-up updates, then
trains for N seconds and records updates/s, target tokens/s and training pairs/s. Writes
benchmarks/results/sizing_<device>.json and the block in docs/training.md, which gives for each size the minutes
one epoch of 10,000 to 1,000,000 pairs takes at the measured pace (pairs/s: the corpus' sentence lengths and
train.batch_tokens decide how many pairs an update holds).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    RESULTS,
    ROOT,
    add_out_dir,
    arguments,
    blamed,
    cell,
    command_line,
    device_tag,
    prog,
    read_json,
    replace_block,
    set_threads,
    sync,
    table_header,
    write_result,
)
from nmt.cli import Parser, command
from nmt.config import load_config, parse_overrides
from nmt.run.lifecycle import prepare_trainer
from nmt.utils import resolve_device

MODULE = "benchmarks.sizing"
DOCS = ROOT / "docs" / "training.md"
START, END = "<!-- sizing:start -->", "<!-- sizing:end -->"
CONFIG = "configs/multi30k_transformer.yaml"
SIZES: dict[str, dict[str, int]] = {  # model.* settings of each size
    "tiny": {"d_model": 64, "heads": 2, "ffn_dim": 256, "encoder_layers": 2, "decoder_layers": 2},
    "small": {"d_model": 256, "heads": 4, "ffn_dim": 1024, "encoder_layers": 3, "decoder_layers": 3},
    "base": {"d_model": 512, "heads": 8, "ffn_dim": 2048, "encoder_layers": 6, "decoder_layers": 6},
}
CORPUS_PAIRS = (10_000, 30_000, 100_000, 1_000_000)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG, help=f"the data and training settings (default {CONFIG})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key for every size, e.g. --set train.threads=2 (repeatable)")
    parser.add_argument("--sizes", nargs="+", choices=tuple(SIZES), default=list(SIZES), help="sizes to measure")
    parser.add_argument("--seconds", type=float, default=60.0, help="timed training seconds per size (default 60)")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed updates first (default 5)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the page whose sizing block is rewritten")
    parser.add_argument("--report-only", action="store_true", help="only rewrite the block from the JSON files")
    add_out_dir(parser)
    return parser.parse_args(argv)


def measure(config: str, overrides: dict[str, Any], seconds: float, warmup: int) -> dict[str, Any]:
    """Updates/s, target tokens/s and pairs/s of the config with `overrides`, over `seconds` of training."""
    cfg = load_config(config, overrides)
    device = resolve_device(cfg.train.device)
    trainer = prepare_trainer(cfg, device)
    groups = trainer.batch_groups()
    for _ in range(warmup):
        group = next(groups, None)
        if group is None:
            break
        trainer.train_step(group)
    sync(device)
    steps = pairs = tgt_tokens = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        group = next(groups, None)
        if group is None:
            break
        trainer.train_step(group)
        steps += 1
        pairs += sum(batch.src.shape[0] for batch in group)
        tgt_tokens += sum(batch.n_tgt_tokens for batch in group)
    sync(device)
    elapsed = time.perf_counter() - start
    if not steps:
        raise SystemExit(f"error: {config}: no training batches to time")
    return {"model": {key: value for key, value in overrides.items() if key.startswith("model.")},
            "parameters": trainer.n_params, "device": device_tag(device, cfg.train.precision),
            "precision": cfg.train.precision, "batch_tokens": cfg.train.batch_tokens,
            "accumulate": cfg.train.accumulate, "steps": steps, "seconds": round(elapsed, 3),
            "updates_per_s": round(steps / elapsed, 4), "pairs_per_s": round(pairs / elapsed, 2),
            "tgt_tokens_per_s": round(tgt_tokens / elapsed, 1)}


def _minutes(pairs: int, pairs_per_s: float) -> str:
    minutes = pairs / pairs_per_s / 60
    return f"{minutes:,.0f}" if minutes >= 10 else f"{minutes:.1f}"


def report(results: Path = RESULTS) -> str:
    """The Markdown block: per record, one row per size with its pace and the minutes an epoch takes."""
    files = sorted(results.glob("sizing_*.json"))
    if not files:
        return f"No results yet: run `python -m {MODULE}` alone on the machine.\n"
    lines = []
    for path in files:
        record = read_json(path)
        with blamed(path):
            m = record["machine"]
            lines += [f"`{path.name}`: {record['config']} on {m['cpu']} ({m['cpu_count']} cores, {m['torch_threads']} "
                      f"torch threads){', ' + m['gpu'] if 'gpu' in m else ''}, {record['date'][:10]}, batch "
                      f"{record['batch_tokens']:,} tokens: `{record['command']}`", ""]
            lines += table_header(["model", "shape", "parameters", "updates/s", "pairs/s",
                                   *(f"epoch of {n:,} pairs (min)" for n in CORPUS_PAIRS)], "llrrr" + "r" * 4)
            for size in record["sizes"]:
                shape = size["model"]
                lines.append(f"| {size['name']} | {shape['model.encoder_layers']}+{shape['model.decoder_layers']} "
                             f"layers, d_model {shape['model.d_model']}, FFN {shape['model.ffn_dim']} | "
                             f"{cell(size['parameters'])} | {size['updates_per_s']:.2f} | "
                             f"{cell(size['pairs_per_s'])} | "
                             + " | ".join(_minutes(n, size["pairs_per_s"]) for n in CORPUS_PAIRS) + " |")
            lines.append("")
    return "\n".join(lines)


@command
def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    if not args.report_only:
        set_threads(args.threads)
        overrides = parse_overrides(args.overrides)
        sizes = []
        for name in args.sizes:
            shape = {f"model.{key}": value for key, value in SIZES[name].items()}
            print(f"sizing: {name} ({args.seconds:g} s)", file=sys.stderr, flush=True)
            sizes.append({"name": name, **measure(args.config, {**overrides, "model.arch": "transformer", **shape},
                                                  args.seconds, args.warmup_steps)})
        device = resolve_device(load_config(args.config, overrides).train.device)
        out = args.out_dir / f"sizing_{sizes[0]['device']}.json"
        write_result(out, device, command_line(MODULE, argv),
                     {"benchmark": "sizing", "config": args.config, "batch_tokens": sizes[0]["batch_tokens"],
                      "threads": torch.get_num_threads(), "sizes": sizes})
        print(f"-> {out}")
    replace_block(args.docs, START, END, report(args.out_dir))
    print(report(args.out_dir), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
