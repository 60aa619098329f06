"""Rank, world size, devices and collectives.

Under torchrun every rank must take the same branch at each collective, or all of them wait forever: so no rank
decides from its own state; each update ends with one all-reduce of an `UpdateTally`, read alike by every rank.
"""

from __future__ import annotations

import os
from dataclasses import astuple, dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    """This process's rank, world size, device and collectives' device."""

    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    comm_device: torch.device = torch.device("cpu")  # NCCL takes CUDA tensors only, gloo CPU tensors
    group: bool = False  # a process group is joined, even of one rank

    @property
    def main(self) -> bool:
        """True on rank 0, which validates and writes files."""
        return self.rank == 0


def init_distributed(device_name: str) -> torch.device | None:
    """Join torchrun's process group and return this rank's device; None outside torchrun."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    use_cuda = torch.cuda.is_available() and device_name != "cpu"
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")


def joined() -> bool:
    """Whether this process has joined a process group."""
    return dist.is_available() and dist.is_initialized()


def shutdown_distributed() -> None:
    """Leave the process group, so NCCL frees its communicators."""
    if joined():
        dist.destroy_process_group()


def current(device: torch.device) -> Dist:
    """This process's place in the joined process group, or a single process."""
    if not (dist.is_available() and dist.is_initialized()):
        return Dist(device=device)
    comm = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    return Dist(dist.get_rank(), dist.get_world_size(), device, comm, group=True)


def barrier(d: Dist) -> None:
    """Wait for every rank."""
    if d.group:
        dist.barrier(device_ids=[d.comm_device.index] if d.comm_device.type == "cuda" else None)


def all_true(d: Dist, flag: bool) -> bool:
    """Whether `flag` holds on every rank."""
    if not d.group:
        return flag
    failed = torch.tensor([0.0 if flag else 1.0], device=d.comm_device)  # (1,)
    dist.all_reduce(failed)
    return failed.item() == 0.0


def gather_objects(d: Dist, obj: Any) -> list[Any]:
    """Every rank's picklable `obj`, by rank, on every rank."""
    if not d.group:
        return [obj]
    out: list[Any] = [None] * d.world
    dist.all_gather_object(out, obj)
    return out


@dataclass
class UpdateTally:
    """One update's facts that decide what every rank does next; fields may be 0-d device tensors."""

    tokens: float = 0.0  # target tokens of the update
    loss: float | torch.Tensor = 0.0  # summed label-smoothed loss
    nll: float | torch.Tensor = 0.0  # summed negative log-likelihood
    nonfinite: float | torch.Tensor = 0.0  # ranks with a non-finite loss or gradient: all skip the update
    stop: float = 0.0  # ranks asking to stop (rank 0's time budget)
    interrupt: float = 0.0  # ranks signalled: stop, save without validating
    early_stop: float = 0.0  # rank 0's early-stopping verdict: drop this update, stop
    exhausted: float = 0.0  # ranks out of batches (epoch limit)
    grad_norm: float | torch.Tensor = 0.0  # rank 0's only (DDP gradients are equal)
    save: float = 0.0  # rank 0's checkpoint clock: all write last.pt

    def agree(self, d: Dist) -> UpdateTally:
        """The sum over ranks, in one all-reduce and one read back to the host."""

        values = astuple(self)
        measured = [v for v in values if isinstance(v, torch.Tensor)]
        if not d.group and not measured:
            return UpdateTally(*values)
        device = d.comm_device if d.group else measured[0].device
        host = torch.tensor([0.0 if isinstance(v, torch.Tensor) else float(v) for v in values],
                            dtype=torch.float64)  # (10,)
        moved = (host.pin_memory() if device.type == "cuda" else host).to(device, non_blocking=True)
        vector = torch.stack([v.to(device, torch.float64) if isinstance(v, torch.Tensor) else moved[i]
                              for i, v in enumerate(values)])  # (10,)
        if d.group:
            dist.all_reduce(vector)
        return UpdateTally(*vector.tolist())
