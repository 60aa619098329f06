"""Forward + backward time and peak memory of one attention layer's core against sequence length.

Usage: python -m benchmarks.attention [--lengths 128 256 ... 4096] [--device auto|cpu|cuda] [--methods ...]

Methods: naive softmax(QK^T)V written out, the fused F.scaled_dot_product_attention, and the variants of
nmt.config.VARIANTS with a FLOP count of their own (`local` and `linear`), all unmasked (encoder
self-attention) on (batch 8, heads 8, length, head size 64) inputs. Time: the median of --repeats forward +
backward passes after one warm-up pass. Memory: on CUDA torch.cuda.max_memory_allocated above the inputs; on CPU
each case runs in a fresh subprocess and reports its peak RSS minus its RSS just before the computation (the
inputs already allocated). Naive cases whose estimated footprint exceeds --memory-cap are skipped, and so is any
case that would not finish within the --budget seconds left. Writes benchmarks/results/attention_<device>.json
and prints the Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import (
    DTYPES,
    add_device,
    add_out_dir,
    begin,
    command_line,
    device_tag,
    module_command,
    module_env,
    peak_rss_mb,
    prog,
    sync,
    table_header,
    timed,
    write_result,
)
from nmt.cli import command
from nmt.config import VARIANTS, ModelConfig
from nmt.flops import SELF_ATTENTION_FLOPS
from nmt.models.attention import variant_class

MODULE = "benchmarks.attention"


def _own_cost_variants() -> tuple[str, ...]:
    """The self-attention variants with a cost of their own: one that costs what full attention
    costs (full itself, or a masked one such as sparse) computes what `fused` times."""
    full = SELF_ATTENTION_FLOPS["full"]
    return tuple(name for name in VARIANTS["self"] if SELF_ATTENTION_FLOPS.get(name) is not full)


METHODS = ("naive", "fused", *_own_cost_variants())
BATCH, HEADS, HEAD_DIM = 8, 8, 64
NAIVE_COPIES = 4  # scores, weights and the gradient of each are alive at once in the backward pass
GB = 1e9


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    add_device(parser)
    parser.add_argument("--repeats", type=int, default=3, help="timed forward + backward passes per case")
    parser.add_argument("--window", type=int, default=8, help="neighbours on each side for `local`")
    parser.add_argument("--memory-cap", type=float, default=8.0, help="GB; larger naive cases are skipped")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--case", nargs=2, metavar=("METHOD", "LENGTH"), help=argparse.SUPPRESS)
    add_out_dir(parser)
    return parser.parse_args(argv)


def _naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, h, T, T)
    return scores.softmax(-1) @ v  # (B, h, T, d)


def _fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


def _registry(name: str, window: int) -> Callable[..., torch.Tensor]:
    own = {s.name for s in VARIANTS["self"][name].settings}
    cfg = ModelConfig(self_attention=name, self_attention_settings={"window": window} if "window" in own else {})
    core = variant_class("self", name).from_config(cfg)

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        mask = core.build_mask(q.size(2), None, causal=False, device=q.device)  # once per batch in the model
        return core(q, k, v, mask)[0]

    return run


def _function(method: str, window: int) -> Callable[..., torch.Tensor]:
    return {"naive": _naive, "fused": _fused}.get(method) or _registry(method, window)


def naive_footprint_gb(length: int, precision: str) -> float:
    """Estimated peak of the naive method: a few (B, h, T, T) matrices."""
    return NAIVE_COPIES * BATCH * HEADS * length**2 * DTYPES[precision].itemsize / GB


def _rss_mb() -> float:
    """Current resident memory, MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_case(method: str, length: int, device: torch.device, precision: str, repeats: int,
             window: int) -> dict[str, float]:
    """Time and memory of forward + backward for one method and length, in this process."""
    fn = _function(method, window)
    dtype = DTYPES[precision]

    def inputs(n: int) -> list[torch.Tensor]:
        """q, k, v (B, h, n, d) that need gradients, and the output's gradient."""
        shape = (BATCH, HEADS, n, HEAD_DIM)
        return [torch.randn(shape, device=device, dtype=dtype, requires_grad=i < 3) for i in range(4)]

    q, k, v, grad = inputs(16)
    fn(q, k, v).backward(grad)  # load kernels and start thread pools before the baseline
    q, k, v, grad = inputs(length)

    def once() -> None:
        for x in (q, k, v):
            x.grad = None
        fn(q, k, v).backward(grad)

    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base = _rss_mb() * 2**20
    once()
    times = [timed(once, device)[1] for _ in range(repeats)]
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else peak_rss_mb() * 2**20
    return {"ms": round(1000 * statistics.median(times), 2), "gb": round(max(peak - base, 0) / GB, 3)}


def _case_in_subprocess(args: argparse.Namespace, method: str, length: int, timeout: float) -> dict:
    """One case in a fresh interpreter, so that its peak RSS is its own."""
    cmd = module_command(MODULE, "--case", method, str(length), "--device", "cpu", "--precision", args.precision,
                         "--repeats", str(args.repeats), "--window", str(args.window))
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                              env=module_env())
    except subprocess.TimeoutExpired:
        return {"skipped": f"stopped after {timeout:.0f} s (time budget)"}
    if done.returncode:
        return {"skipped": f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown_table(record: dict) -> str:
    """Rows of lengths, a `ms / MiB` column per method (the JSON holds decimal GB); skipped cases say why."""
    methods = record["methods"]
    lines = table_header(["length", *(f"{m} ms / MiB" for m in methods)], "r" * (1 + len(methods)))
    for length in record["lengths"]:
        cells = []
        for m in methods:
            case = record["results"][m].get(str(length), {})
            mib = case.get("gb", 0) * GB / 2**20  # the JSON holds decimal GB
            cells.append(case["skipped"] if "skipped" in case else f"{case['ms']:.1f} / {mib:,.0f}")
        lines.append(f"| {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _predicted(history: list[tuple[int, float, float]], length: int) -> float:
    """Seconds the next case should take: the last one's compute scaled quadratically (an upper bound for
    every method here), plus its fixed overhead (a subprocess start)."""
    if not history:
        return 0.0
    last_length, compute, overhead = history[-1]
    return compute * (length / last_length) ** 2 + overhead


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    if args.case:
        method, length = args.case[0], int(args.case[1])
        print(json.dumps(run_case(method, length, device, args.precision, args.repeats, args.window)))
        return 0
    start = time.monotonic()
    results: dict[str, dict[str, dict]] = {m: {} for m in args.methods}
    history: dict[str, list[tuple[int, float, float]]] = {m: [] for m in args.methods}
    for length in sorted(args.lengths):
        for method in args.methods:
            left = args.budget - (time.monotonic() - start)
            footprint = naive_footprint_gb(length, args.precision)
            if method == "naive" and footprint > args.memory_cap:
                case = {"skipped": f"would exceed {args.memory_cap:g} GB"}
            elif _predicted(history[method], length) > left:
                case = {"skipped": "time budget"}
            else:
                began = time.monotonic()
                if device.type == "cuda":
                    case = run_case(method, length, device, args.precision, args.repeats, args.window)
                else:
                    case = _case_in_subprocess(args, method, length, max(left, 1.0))
                if "skipped" not in case:
                    compute = case["ms"] / 1000 * (args.repeats + 1)
                    history[method].append((length, compute, max(time.monotonic() - began - compute, 0.0)))
            results[method][str(length)] = case
            print(f"{method:>6} {length:>5}: " + (case["skipped"] if "skipped" in case else
                                                  f"{case['ms']:.1f} ms, {case['gb']:.3f} GB"), flush=True)
    record = {"benchmark": "attention", "device": device_tag(device), "precision": args.precision,
              "threads": torch.get_num_threads(), "shape": {"batch": BATCH, "heads": HEADS, "head_dim": HEAD_DIM},
              "window": args.window, "repeats": args.repeats, "memory_cap_gb": args.memory_cap,
              "budget_s": args.budget, "methods": args.methods, "lengths": sorted(args.lengths),
              "results": results}
    out = args.out_dir / f"attention_{device_tag(device, args.precision)}.json"
    write_result(out, device, command_line(MODULE, argv), record)
    print(markdown_table(record))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
