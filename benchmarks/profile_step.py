"""Where a training step's time goes: torch.profiler over a few updates, summed into a handful of categories.

Usage: python -m benchmarks.profile_step CONFIG [--steps 5] [--warmup-steps 3] [--set key=value ...] [--threads T]

Builds the trainer as benchmarks/train.py does (nmt.run.lifecycle.prepare_trainer), runs the warm-up updates, then
profiles --steps updates on the CPU (batch building included) and sums each operator's self time into: matmuls,
attention, layer norm, dropout, softmax and loss, optimizer, embedding, elementwise and other operators, and
what no operator accounts for (data, Python and framework overhead). Writes benchmarks/results/profile_<config
name>_cpu.json and prints the table that `benchmarks/run_all.py` puts into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import (
    add_out_dir,
    arguments,
    command_line,
    markdown_row,
    prog,
    set_threads,
    table_header,
    write_result,
)
from nmt.cli import command, config_from_args, config_parser
from nmt.run.lifecycle import prepare_trainer

MODULE = "benchmarks.profile_step"
# (category, substrings of aten operator names), first match wins; order matters (softmax before "attention")
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("optimizer", ("_foreach_", "_fused_adam", "adam", "Optimizer.")),
    ("attention", ("scaled_dot_product", "flash_attention", "_efficient_attention", "sdpa")),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")),
    ("layer norm", ("layer_norm",)),
    ("dropout", ("dropout", "_Dropout", "bernoulli")),
    ("softmax and loss", ("softmax", "nll_loss", "cross_entropy", "log_softmax", "logsumexp", "SmoothedCrossEntropy")),
    ("embedding", ("embedding",)),
    ("elementwise and other operators", ("aten::",)),
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = config_parser(prog(MODULE), __doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="profiled updates (default 5)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="updates before profiling (default 3)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: train.threads)")
    add_out_dir(parser)
    return parser.parse_args(argv)


def category(name: str) -> str | None:
    """The category of an operator, or None for ranges that are not operators (profiler labels)."""
    for label, keys in CATEGORIES:
        if any(key in name for key in keys):
            return label
    return None


# Autograd functions whose operators all belong to one part, whatever their names: nmt's dropout (its mask is
# drawn with random_ and applied with where) and the label-smoothed loss (amax, exp_, sum, ... over the logits).
SCOPES = ("_Dropout", "_SmoothedCrossEntropy")


def scoped_name(event) -> str:
    """An operator's name, prefixed by the innermost enclosing range of SCOPES, so that range decides its part."""
    parent = event.cpu_parent
    while parent is not None:
        if any(scope in parent.name for scope in SCOPES):
            return f"{parent.name}/{event.name}"
        parent = parent.cpu_parent
    return event.name


def breakdown(events: list[tuple[str, float]], wall_us: float) -> dict[str, float]:
    """Seconds per category from (operator name, self CPU microseconds); the rest of `wall_us` is overhead."""
    seconds = {label: 0.0 for label, _ in CATEGORIES}
    for name, self_us in events:
        label = category(name)
        if label is not None:
            seconds[label] += self_us / 1e6
    seconds["data, Python and framework overhead"] = max(0.0, wall_us / 1e6 - sum(seconds.values()))
    return seconds


def markdown_table(record: dict) -> str:
    """The breakdown as a Markdown table: seconds per update and share of the step."""
    steps, total = record["steps"], record["seconds"]
    rows = table_header(["part", "ms per update", "share"], "lrr")
    for label, value in sorted(record["breakdown"].items(), key=lambda kv: -kv[1]):
        rows.append(markdown_row([label, f"{1000 * value / steps:.1f}", f"{100 * value / total:.1f}%"]))
    return "\n".join(rows)


@command
def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    cfg = config_from_args(args)
    set_threads(args.threads or cfg.train.threads)
    trainer = prepare_trainer(cfg, torch.device("cpu"))
    groups = trainer.batch_groups()
    for _ in range(args.warmup_steps):
        trainer.train_step(next(groups))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step(next(groups))
        wall = time.perf_counter() - start
    events = [(scoped_name(e), e.self_cpu_time_total) for e in prof.events()]
    parts = breakdown(events, wall * 1e6)
    result = {"benchmark": "profile", "config": cfg.name, "arch": cfg.model.arch, "device": "cpu",
              "precision": cfg.train.precision, "threads": torch.get_num_threads(), "steps": args.steps,
              "seconds": round(wall, 3), "breakdown": {k: round(v, 4) for k, v in parts.items()},
              "top_operators": [{"name": e.key, "self_ms": round(e.self_cpu_time_total / 1e3, 1), "calls": e.count}
                                for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]]}
    out = args.out_dir / f"profile_{cfg.name}_cpu.json"
    write_result(out, torch.device("cpu"), command_line(MODULE, argv), result)
    print(markdown_table(result))
    print(f"{args.steps} updates in {wall:.1f} s (profiler on) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
