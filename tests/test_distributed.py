"""Training across processes: 2 gloo ranks under torchrun always agree, resume exactly and follow one process.

One torchrun launch (tests/ddp_worker.py) runs every scenario that needs no killing; its results are shared.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.gpu_check import kill_tree
from nmt.checkpoint import load_checkpoint, load_contents, save_contents
from nmt.cli import train_main
from nmt.config import load_config
from nmt.data import prepare
from nmt.distributed import Dist, UpdateTally
from nmt.trainer import Trainer
from nmt.utils import rank_seed, set_rng_state
from tests.conftest import REPO, tiny_config
from tests.ddp_worker import BUDGET_RUNS, STRAIGHT_STEPS

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The worker's folder and each rank's results. The launch is killed with SIGKILL, torchrun and both workers
    at once, once the results are written and its last run ("killed") has its first last.pt."""
    folder = tmp_path_factory.mktemp("ddp")
    trail = folder / "trail.log"  # the workers' stderr: which rank was in which scenario
    ranks = [folder / f"rank{r}.json" for r in range(2)]
    last = folder / "runs" / "killed" / "checkpoints" / "last.pt"
    with trail.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen([*TORCHRUN, str(REPO / "tests" / "ddp_worker.py"), str(folder)], env=ENV,
                                stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 400
    while not (last.exists() and all(p.exists() for p in ranks)) and proc.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if proc.poll() is None:  # torchrun's workers run in sessions of their own: the group alone would miss them
        kill_tree(proc)
    code = proc.wait(timeout=60)
    said = trail.read_text(encoding="utf-8", errors="replace")
    if not all(p.exists() for p in ranks):
        pytest.fail("the torchrun scenarios failed or hung:\n" + "\n".join(
            line for line in said.splitlines() if "ddp_worker rank" in line or "error:" in line)[-3000:])
    assert code == -signal.SIGKILL, f"the killed run ended before it could be killed:\n{said[-3000:]}"
    return folder, [json.loads(p.read_text()) for p in ranks]


def test_time_budget_with_a_slow_rank_finishes_every_time(scenarios):
    _, ranks = scenarios
    runs = [name for name in ranks[0] if name.startswith("budget_")]
    assert len(runs) == BUDGET_RUNS >= 3  # rank 1 slow, rank 0 slow, rank 1 slow again
    for name in runs:
        assert ranks[0][name]["rc"] == ranks[1][name]["rc"] == 0, ranks[0][name]
        assert ranks[0][name]["step"] == ranks[1][name]["step"] > 0


def test_a_nonfinite_loss_on_one_rank_is_skipped_by_all(scenarios):
    _, ranks = scenarios
    for rank in ranks:
        assert rank["nonfinite"]["rc"] == 0 and rank["nonfinite"]["skipped"] == 1
        assert rank["nonfinite_abort"]["rc"] == 1  # both give up together, none waits forever
    assert ranks[0]["nonfinite"]["step"] == ranks[1]["nonfinite"]["step"]


def test_early_stopping_decided_on_rank_0_stops_both(scenarios):
    folder, ranks = scenarios
    assert ranks[0]["early_stop"]["step"] == ranks[1]["early_stop"]["step"] == 8  # validations at 4 and 8
    saved = load_contents(folder / "runs" / "early_stop" / "checkpoints" / "last.pt")
    assert saved.progress["step"] == 8 and saved.progress["bad_validations"] == 1


def test_dropout_noise_differs_across_ranks(scenarios):
    _, ranks = scenarios
    assert ranks[0]["budget_0"]["dropout_mask"] != ranks[1]["budget_0"]["dropout_mask"]
    assert rank_seed(1, 0) != rank_seed(1, 1)


def test_two_gloo_ranks_follow_one_process(scenarios, tmp_path):
    # Gradients are summed in another order across ranks; a larger Adam eps keeps that rounding from being
    # amplified on near-zero gradients, so the trajectories agree to well under 0.1 %.
    folder, _ = scenarios
    single = tiny_config(tmp_path, name="ddp", model={"dropout": 0.0},
                         train={"device": "cpu", "max_steps": 6, "eval_every": 6, "log_every": 1, "eps": 1e-6})
    assert train_main([str(single), "--no-evaluate", "--set", "train.accumulate=2"]) == 0

    def losses(root: Path) -> list[float]:
        lines = [json.loads(x) for x in (root / "runs" / "ddp" / "metrics.jsonl").read_text().splitlines()]
        return [x["loss"] for x in lines if x["type"] == "train"]

    assert len(losses(folder)) == 6
    assert losses(folder) == pytest.approx(losses(tmp_path), rel=1e-3)


def test_ddp_run_killed_with_sigkill_resumes_bitwise(scenarios):
    folder, _ = scenarios
    last = folder / "runs" / "killed" / "checkpoints" / "last.pt"  # the scenarios' launch was killed here
    saved = load_checkpoint(last)
    assert 0 < saved["progress"]["step"] < STRAIGHT_STEPS and len(saved["rng_ranks"]) == 2
    command = [*TORCHRUN, "-m", "nmt", "train", str(folder / "killed.yaml"), "--no-evaluate"]
    result = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    a = load_contents(folder / "runs" / "straight" / "checkpoints" / "last.pt")
    b = load_contents(last)
    assert a.progress["step"] == b.progress["step"] == STRAIGHT_STEPS
    for key, value in a.model.items():
        assert torch.equal(value, b.model[key]), key
    for mine, theirs in zip(a.training.rng_ranks, b.training.rng_ranks):
        assert torch.equal(mine["torch"], theirs["torch"])


class Elsewhere(torch.Tensor):
    """Stands in for a tensor on another device: CPU-only uses fail until it is copied with .cpu()."""

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert a tensor on another device to numpy; use .cpu() first")

    def cpu(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor).clone()


def _map_elsewhere(value):
    """The mapping a checkpoint loaded onto another device goes through: every tensor ends up there."""
    if isinstance(value, torch.Tensor):
        return value.as_subclass(Elsewhere)
    if isinstance(value, dict):
        return {k: _map_elsewhere(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_elsewhere(v) for v in value)
    return value


def test_rng_restore_from_a_checkpoint_mapped_to_another_device(tmp_path, monkeypatch):
    cfg = load_config(str(tiny_config(tmp_path)))
    trainer = Trainer(cfg, prepare(cfg, log=lambda _m: None), torch.device("cpu"))
    save_contents(trainer.contents(), tmp_path / "last.pt")
    expected = (torch.rand(5), np.random.rand(5))
    mapped = _map_elsewhere(load_checkpoint(tmp_path / "last.pt"))["rng"]
    assert isinstance(mapped["torch"], Elsewhere) and isinstance(mapped["numpy"][1], Elsewhere)
    set_cpu_state = torch.set_rng_state

    def cpu_only(state):  # what torch enforces: a CPU byte tensor, as on a CUDA machine
        if type(state) is not torch.Tensor or state.device.type != "cpu":
            raise TypeError("RNG state must be a CPU tensor")
        set_cpu_state(state)

    monkeypatch.setattr(torch, "set_rng_state", cpu_only)
    set_rng_state(mapped)
    assert torch.equal(torch.rand(5), expected[0]) and np.array_equal(np.random.rand(5), expected[1])


def test_control_vector_sums_and_single_process_is_identity():
    tally = UpdateTally(tokens=12, loss=3.5, nonfinite=True, stop=False, exhausted=1)
    agreed = tally.agree(Dist())
    assert agreed == tally and agreed is not tally


def test_a_locked_run_folder_stops_every_rank_at_once(scenarios):
    """Rank 0 finds the run folder locked; every rank hears it through the process group, none waits."""
    _, ranks = scenarios
    assert all(rank["locked"]["rc"] == 1 and rank["locked"]["seconds"] < 60 for rank in ranks), ranks
    said = ranks[0]["locked"]["stderr"] + ranks[1]["locked"]["stderr"]
    assert "another nmt-train is training" in said and "another process of this torchrun job" in said, said
