"""The training code's off-CPU path, checked on the CPU: the `meta` device stands in for a GPU.

Meta tensors have shapes but no data, so anything that would make the host wait for a GPU (reading a value,
a boolean mask's count, a copy back to the host) fails on them. `HostSyncs` counts those operations and
answers the one read an update is allowed with figures of its choosing.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import astuple
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import nmt.distributed
from nmt.checkpoint import save_contents
from nmt.config import load_config
from nmt.data import collate, prepare
from nmt.data.batching import prefetch
from nmt.distributed import Dist, UpdateTally
from nmt.kernels import label_smoothed_loss
from nmt.models.rnn import GRUEncoder
from nmt.trainer import Trainer
from tests.conftest import tiny_config

META = torch.device("meta")
aten = torch.ops.aten
WAITS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.equal.default, aten.masked_select.default}


class HostSyncs(TorchDispatchMode):
    """Records every operation on a non-CPU tensor that makes the host wait for the device.

    A read back to the host from the meta device is answered with `answer(shape, dtype)`, a scalar read with 1
    and a comparison with False, so that the count goes on past them.
    """

    def __init__(self, answer: Callable[[torch.Size, torch.dtype], torch.Tensor]) -> None:
        super().__init__()
        self.answer = answer
        self.waits: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if not any(t.device.type != "cpu" for t in tensors):
            return func(*args, **kwargs)
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        to_host = (func is aten._to_copy.default and str(kwargs.get("device")) == "cpu"
                   or func is aten.copy_.default and args[0].device.type == "cpu" and args[1].device.type != "cpu")
        masked = func is aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1])
        if func in WAITS or masked or to_host:
            self.waits.append(str(func))
            if source is not None and source.device.type == "meta":  # answered, so that counting goes on
                if func is aten._to_copy.default:
                    return self.answer(source.shape, kwargs.get("dtype") or source.dtype)
                if func is aten._local_scalar_dense.default:
                    return 1
                if func is aten.equal.default:
                    return False
        return func(*args, **kwargs)


def _control_answer(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """The control vector of an applied update: 100 tokens, finite loss and gradient norm."""
    return torch.tensor(astuple(UpdateTally(tokens=100.0, loss=250.0, nll=200.0, grad_norm=2.0)), dtype=dtype)


@pytest.fixture(scope="module")
def trainers(tmp_path_factory) -> dict[str, Trainer]:
    """A Trainer of each model family on the meta device (the data prepared once, on the CPU)."""
    folder = tmp_path_factory.mktemp("gpu_path")
    found = {}
    for arch in ("transformer", "rnn"):
        cfg = load_config(str(tiny_config(folder, name=arch, arch=arch)))
        found[arch] = Trainer(cfg, prepare(cfg, log=lambda _m: None), META)
    return found


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_forward_loss_and_backward_of_each_family_run_off_the_cpu(trainers, arch):
    trainer = trainers[arch]
    (batch,) = next(trainer.batch_groups())
    assert batch.src.device == META and batch.src_lengths.device.type == "cpu"
    with HostSyncs(_control_answer) as syncs:
        trainer.net.train()
        logits, target = trainer._forward(batch)  # (N, V), (N,)
        loss, nll, count = label_smoothed_loss(logits, target, 0.1, trainer.vocab.pad_id)
        loss.backward()
    assert logits.shape == (batch.n_tgt_tokens, trainer.vocab.tgt_size) and target.shape == (batch.n_tgt_tokens,)
    assert loss.device == META and count.device == META
    assert all(p.grad is not None and p.grad.device == META for p in trainer.model.parameters() if p.requires_grad)
    assert syncs.waits == []


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_one_update_waits_for_the_device_at_most_once(trainers, arch):
    trainer = trainers[arch]
    group = next(trainer.batch_groups())
    with HostSyncs(_control_answer) as syncs:
        result = trainer.train_step(group)
    assert len(syncs.waits) <= 1, syncs.waits
    assert result.applied and result.stats["grad_norm"] > 0 and result.stats["loss"] == 2.5


def test_the_sampler_follows_the_batches_handed_out_not_those_read_ahead(trainers):
    trainer = trainers["transformer"]
    train, before = trainer.data.splits["train"], copy.copy(trainer.sampler)
    stream = trainer.batches()
    shapes = [tuple(next(stream).src.shape) for _ in range(3)]
    assert trainer.sampler.state_dict()["position"] == before.state_dict()["position"] + 3
    expected = [collate([(train.src[i], train.tgt[i]) for i in indices]) for indices in itertools.islice(before, 3)]
    assert shapes == [tuple(batch.src.shape) for batch in expected]
    stream.close()


def test_prefetch_keeps_order_passes_errors_on_and_stops_when_dropped():
    assert list(prefetch(iter(range(50)), depth=2)) == list(range(50))

    def failing():
        yield 1
        raise ValueError("bad batch")

    stream = prefetch(failing())
    assert next(stream) == 1
    with pytest.raises(ValueError, match="bad batch"):
        next(stream)
    endless = prefetch(iter(range(10**9)))
    assert next(endless) == 0
    endless.close()  # the worker sees the consumer gone and ends (a daemon thread, it would not hold the exit)


def test_the_gru_encoder_off_the_cpu_matches_packing_on_it():
    torch.manual_seed(0)
    encoder = GRUEncoder(torch.nn.Embedding(20, 8), 6, 2, 0.0)
    lengths = torch.tensor([7, 3, 5, 3, 1])
    x = torch.randn(5, 7, 8)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, final = encoder.rnn(packed)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=7)
    sorted_out, sorted_final = encoder.run_sorted(x, lengths)
    assert torch.equal(out, sorted_out) and torch.equal(final, sorted_final)


def test_collectives_get_tensors_on_the_communication_device(monkeypatch):
    seen = []
    monkeypatch.setattr(nmt.distributed.dist, "all_reduce", lambda tensor: seen.append(tensor.device))
    dist = Dist(rank=0, world=2, device=META, comm_device=META, group=True)
    measured = torch.ones((), device=META)
    with HostSyncs(_control_answer) as syncs:
        agreed = UpdateTally(tokens=3.0, loss=measured, nonfinite=measured, grad_norm=measured).agree(dist)
    assert seen == [META] and agreed.tokens == 100.0 and len(syncs.waits) == 1


def test_a_cpu_run_never_calls_cuda_rng_functions(tmp_path, monkeypatch):
    """Even on a machine with GPUs: a CPU run saves and restores no CUDA generator (nor opens a context)."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a CPU run called a torch.cuda RNG function")

    cfg = load_config(str(tiny_config(tmp_path, train={"max_steps": 2})))
    trainer = Trainer(cfg, prepare(cfg, log=lambda _m: None), torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all"):
        monkeypatch.setattr(torch.cuda, name, refuse)
    trainer.fit()
    path: Path = trainer.checkpoints.folder / "last.pt"
    assert "cuda" not in trainer.contents().training.rng
    save_contents(trainer.contents(), path)
    Trainer(cfg, trainer.data, torch.device("cpu")).resume(path)


class OpCount(TorchDispatchMode):
    """Counts the calls of one operator."""

    def __init__(self, op) -> None:
        super().__init__()
        self.op, self.calls = op, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func is self.op
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("device", "passes"), [("cpu", 4), ("meta", 1)])
def test_the_loss_walks_the_logits_in_blocks_on_the_cpu_and_in_one_pass_elsewhere(device, passes):
    logits = torch.randn(1000, 50, device=device, requires_grad=True)  # (N, V)
    target = torch.randint(1, 50, (1000,), device=device)  # (N,)
    with OpCount(aten.exp_.default) as count:
        label_smoothed_loss(logits, target, 0.1, pad_id=0)
    assert count.calls == passes
