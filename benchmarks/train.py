"""Training throughput of a config: tokens/s, steps/s, padding, peak memory and model-FLOPs utilisation.

Usage: python -m benchmarks.train CONFIG --seconds N [--warmup-steps K] [--set key=value ...] [--threads T]

Builds the trainer with nmt.run.lifecycle.prepare_trainer (the config's data prepared and cached as nmt-prepare does),
runs K warm-up updates, then trains for N seconds and writes benchmarks/results/train_<config
name>_<device>.json. MFU is the model's analytic FLOPs per second (nmt.flops, 3 x forward per update) over the
peak of a large square matmul that this script measures on the same device, in the training precision, after
training. On CUDA one update after the warm-up runs under torch.cuda.set_sync_debug_mode:
`host_syncs_per_update` counts its waits for the GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable

import torch

from benchmarks.common import (
    add_out_dir,
    arguments,
    command_line,
    device_tag,
    matmul_peak,
    matmul_size,
    peak_rss_mb,
    prog,
    set_threads,
    sync,
    write_result,
)
from nmt.cli import command, config_from_args, config_parser
from nmt.data import Batch
from nmt.flops import training_flops
from nmt.run.lifecycle import prepare_trainer
from nmt.utils import resolve_device as pick_device

MODULE = "benchmarks.train"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = config_parser(prog(MODULE), __doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="timed training seconds (default 60)")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed updates first (default 5)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: train.threads, "
                                                               "else torch's choice)")
    parser.add_argument("--matmul-size", type=int, default=0,
                        help="side of the peak-measuring matmul (default 2048 on CPU, 8192 on CUDA)")
    parser.add_argument("--peak-seconds", type=float, default=3.0, help="seconds per matmul peak measurement")
    add_out_dir(parser)
    return parser.parse_args(argv)


def host_syncs(update: Callable[[], object], device: torch.device) -> int | None:
    """The host's waits for the GPU in one `update`, as torch.cuda.set_sync_debug_mode reports them (None off CUDA)."""
    if device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            update()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


@command
def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    cfg = config_from_args(args)
    device = pick_device(cfg.train.device)
    set_threads(args.threads or cfg.train.threads)
    began = time.perf_counter()

    def stage(what: str) -> None:
        """One progress line on stderr, so a run cut off by a time limit shows where its time went."""
        print(f"bench_train: {what} at {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)

    def prepared(message: str) -> None:
        """The data summary comes once preparation is done; the progress lines before it are not shown."""
        if message.startswith("\n"):
            stage("data prepared")

    trainer = prepare_trainer(cfg, device, prepared)
    stage(f"model built ({trainer.n_params:,} parameters)")
    pad_id, vocab_size = trainer.vocab.pad_id, trainer.vocab.tgt_size
    groups = trainer.batch_groups()

    def update() -> list[Batch] | None:
        group = next(groups, None)
        if group is not None:
            trainer.train_step(group)
        return group

    for done in range(1, args.warmup_steps + 1):
        if update() is None:
            break
        sync(device)
        stage(f"warm-up update {done} done")  # a run cut off in warm-up still shows the time per update
    syncs = host_syncs(update, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    steps = src_tokens = tgt_tokens = padded = 0
    lengths: list[tuple[torch.Tensor, torch.Tensor]] = []
    sync(device)
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        group = update()
        if group is None:
            break
        steps += 1
        for batch in group:
            src_tokens += batch.n_src_tokens
            tgt_tokens += batch.n_tgt_tokens
            padded += batch.src.numel() + batch.tgt_in.numel()
            lengths.append((batch.src_mask.sum(1), batch.tgt_out.ne(pad_id).sum(1)))  # (B,), (B,)
    sync(device)
    seconds = time.perf_counter() - start
    if not steps:
        print("error: no training batches", file=sys.stderr)
        return 1
    stage(f"{steps} timed updates done")
    rss = peak_rss_mb()
    gpu_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    flops = sum(training_flops(cfg.model, vocab_size, s.tolist(), t.tolist()) for s, t in lengths)
    precision = cfg.train.precision
    size = args.matmul_size or matmul_size(device)
    stage("FLOPs counted")
    peaks = {p: matmul_peak(device, p, size, args.peak_seconds) for p in sorted({"fp32", "bf16", precision})}
    stage("matmul peaks measured")
    result = {
        "benchmark": "train", "config": cfg.name, "config_file": args.config, "arch": cfg.model.arch,
        "device": device_tag(device), "precision": precision, "threads": torch.get_num_threads(),
        "batch_tokens": cfg.train.batch_tokens, "accumulate": cfg.train.accumulate,
        "parameters": trainer.n_params, "warmup_steps": args.warmup_steps, "host_syncs_per_update": syncs,
        "tf32": cfg.train.tf32 if device.type == "cuda" else None,
        "seconds": round(seconds, 3), "steps": steps, "steps_per_s": round(steps / seconds, 3),
        "tgt_tokens_per_s": round(tgt_tokens / seconds, 1), "src_tokens_per_s": round(src_tokens / seconds, 1),
        "padding_share": round(1.0 - (src_tokens + tgt_tokens) / padded, 4),
        "peak_rss_mb": round(rss, 1), "peak_gpu_mb": None if gpu_mb is None else round(gpu_mb, 1),
        "train_flops_per_tgt_token": round(flops / tgt_tokens),
        "model_tflops_per_s": round(flops / seconds / 1e12, 4),
        "matmul_size": size, "matmul_peak_tflops": {p: round(v / 1e12, 4) for p, v in peaks.items()},
        "mfu": round(flops / seconds / peaks[precision], 4),
    }
    out = args.out_dir / f"train_{cfg.name}_{device_tag(device, precision)}.json"
    write_result(out, device, command_line(MODULE, argv), result)
    print(f"{cfg.name} on {result['device']} {precision}, {result['threads']} threads: "
          f"{result['tgt_tokens_per_s']:.0f} tgt tok/s, {result['src_tokens_per_s']:.0f} src tok/s, "
          f"{result['steps_per_s']:.2f} steps/s, padding {100 * result['padding_share']:.1f}%, "
          f"peak RSS {rss:.0f} MB, MFU {100 * result['mfu']:.1f}% of "
          f"{result['matmul_peak_tflops'][precision]:.3f} TFLOP/s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
