"""Run under torchrun (2 gloo ranks) by tests/test_distributed.py: several training scenarios in one launch.

Usage: torchrun --standalone --nproc_per_node 2 tests/ddp_worker.py FOLDER

Each scenario trains a tiny model on the sample, on the CPU (gloo), through `nmt-train`'s own code path,
with a fault injected into one rank by patching (a slow rank, a non-finite loss, a worsening validation).
Every rank writes what its run ended with to FOLDER/rank<R>.json; a hang shows up as the launch timing out. The
last run, "killed", is there to be killed: the launch is stopped with SIGKILL once its first checkpoint is written.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import nmt.trainer
from nmt.cli import train_main
from nmt.distributed import init_distributed
from nmt.run.lock import run_lock
from nmt.trainer import Trainer
from tests.conftest import tiny_config

BUDGET_RUNS = 3  # the slowed rank alternates: 1, 0 (whose clock decides), 1
STRAIGHT_STEPS = 60  # the uninterrupted run tests/test_distributed.py's killed one must equal (past an epoch: 52)
SLOW_SECONDS = 0.01  # slept in every update of the slowed rank


def _config(folder: Path, name: str, model: dict | None = None, **train) -> Path:
    return tiny_config(folder, name=name, model=model or {}, train={"device": "cpu", **train})


def _budget_config(folder: Path, name: str) -> Path:
    # Only the wall-clock budget stops these runs: no step or epoch limit, one validation at the end.
    return _config(folder, name, max_steps=0, max_minutes=0.005, eval_every=1000, log_every=1000)  # 0.3 s


def main(folder: Path) -> None:
    init_distributed("cpu")
    rank = dist.get_rank()
    results: dict[str, dict] = {}
    current: dict = {}
    original_fit, original_step = Trainer.fit, Trainer.train_step

    def fit(self: Trainer):
        current["dropout_mask"] = F.dropout(torch.ones(64), 0.5, training=True).ne(0).tolist()
        progress = original_fit(self)
        current.update(step=progress.step, skipped=progress.skipped)
        return progress

    slowed = {"rank": -1}

    def slow_step(self: Trainer, group):
        if rank == slowed["rank"]:
            time.sleep(SLOW_SECONDS)
        return original_step(self, group)

    Trainer.fit, Trainer.train_step = fit, slow_step

    def run(name: str, config: Path) -> None:
        current.clear()
        try:
            current["rc"] = train_main([str(config), "--no-evaluate"])
        except Exception as err:  # noqa: BLE001 - recorded for the test to report
            current["error"] = f"{type(err).__name__}: {err}"
        results[name] = dict(current)
        print(f"ddp_worker rank {rank}: {name} -> {results[name]}", file=sys.stderr, flush=True)  # a hang's trail

    for k in range(BUDGET_RUNS):  # rank 1, then rank 0 (whose clock decides), then rank 1, ... runs slow
        slowed["rank"] = 1 - k % 2
        run(f"budget_{k}", _budget_config(folder, f"budget_{k}"))
    slowed["rank"] = -1

    # A non-finite loss on rank 1 only, in its third update: every rank skips that update together.
    loss_fn, calls = nmt.trainer.label_smoothed_loss, {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        out = loss_fn(*args, **kwargs)
        return (out[0] * float("nan"), *out[1:]) if calls["n"] == 3 else out

    if rank == 1:
        nmt.trainer.label_smoothed_loss = poisoned
    # Bounded in updates, not time: on a loaded machine a 0.3 s budget could end before the third update.
    run("nonfinite", _config(folder, "nonfinite", max_steps=5, eval_every=1000, log_every=1000))
    # Rank 1's loss is never finite again: both ranks give up after train.max_nonfinite skips in a row.
    if rank == 1:
        nmt.trainer.label_smoothed_loss = lambda *a, **k: (loss_fn(*a, **k)[0] * float("nan"), *loss_fn(*a, **k)[1:])
    run("nonfinite_abort", _config(folder, "nonfinite_abort", max_steps=50, max_nonfinite=2))
    nmt.trainer.label_smoothed_loss = loss_fn

    # Validation runs on rank 0 only; make it worsen so early stopping (patience 1) fires at the 2nd one.
    scores, seen = nmt.trainer.validation_scores, {"n": 0}

    def worsening(*args, **kwargs):
        seen["n"] += 1
        return {"loss": float(seen["n"]), "ppl": 1.0}

    nmt.trainer.validation_scores = worsening
    run("early_stop", _config(folder, "early_stop", max_steps=40, max_minutes=5.0, eval_every=4, patience=1,
                              early_stop_metric="loss"))
    nmt.trainer.validation_scores = scores

    Trainer.fit, Trainer.train_step = original_fit, original_step
    # The uninterrupted reference for the SIGKILL test, and the DDP side of the 1 x B vs 2 x B/2 test.
    run("straight", _config(folder, "straight", max_steps=STRAIGHT_STEPS, eval_every=10, batch_tokens=400))
    run("ddp", _config(folder, "ddp", {"dropout": 0.0}, max_steps=6, eval_every=6, log_every=1, eps=1e-6))

    # A run folder another nmt-train holds (here rank 0's own second handle on its lock file, which flock treats
    # as another holder): rank 0 is refused and every rank hears it through the process group; what they said
    # and how long it took go into the results.
    lock = run_lock(folder / "runs" / "locked") if rank == 0 else contextlib.nullcontext()
    said, start = io.StringIO(), time.monotonic()
    with lock, contextlib.redirect_stderr(said):
        run("locked", _config(folder, "locked", max_steps=4))
    results["locked"].update(seconds=time.monotonic() - start, stderr=said.getvalue())
    (folder / f"rank{rank}.json").write_text(json.dumps(results), encoding="utf-8")
    dist.barrier()  # both results are written before the run that gets killed starts

    # Last, the run tests/test_distributed.py kills with SIGKILL (the whole launch at once, as a lost machine)
    # once its first last.pt is there, then resumes in a launch of its own and compares with "straight".
    run("killed", _config(folder, "killed", max_steps=STRAIGHT_STEPS, eval_every=10, batch_tokens=400))
    dist.barrier()  # no rank tears the group down while the other still uses it
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
