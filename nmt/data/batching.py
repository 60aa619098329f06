"""Token-bucket batches, sharded across ranks, and the padded tensors built from them."""

from __future__ import annotations

import copy
import dataclasses
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch.utils.data import Sampler

from nmt.data.store import Split
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID


class BatchList(Sequence[list[int]]):
    """The sampler's fixed batches as one index array and boundaries (not Python lists)."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray) -> None:
        self.order, self.bounds = order, bounds

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, b: int) -> list[int]:  # type: ignore[override]
        if not -len(self) <= b < len(self):
            raise IndexError(b)
        b %= len(self)
        return self.order[self.bounds[b]:self.bounds[b + 1]].tolist()


def _stable_order(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """Stable indices sorting by (source length, target length), as np.lexsort but faster on one packed key."""
    if not len(src):
        return np.zeros(0, dtype=np.int64)
    key = src.astype(np.int64) * (int(tgt.max()) + 1) + tgt
    if key.max() < 1 << 16:
        key = key.astype(np.uint16)
    return np.argsort(key, kind="stable")


def _greedy_cuts(costs: np.ndarray, budget: int) -> np.ndarray:
    """Greedy batch boundaries: a batch grows while its size times its largest cost fits the budget (vectorized
    over widening windows)."""
    n, bounds, start, width = len(costs), [0], 0, 64
    while start < n:
        while True:
            window = costs[start:start + width]
            over = np.arange(1, len(window) + 1) * np.maximum.accumulate(window) > budget
            over[0] = False  # a pair over the budget on its own still forms a batch
            if over.any() or start + width >= n:
                break
            width *= 2
        end = start + int(np.argmax(over)) if over.any() else n
        bounds.append(end)
        width = max(64, 2 * (end - start))
        start = end
    return np.array(bounds, dtype=np.int64)


class TokenBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches under a token budget, shuffled per epoch, resumable mid-epoch and shardable.

    A batch of n pairs costs n * max(longest source, longest target) + n (EOS/BOS). The batches are fixed; their
    order is shuffled with seed + epoch. With num_replicas > 1 the epoch's list is padded by repeating its first
    batches, and rank r takes every num_replicas-th from r.
    """

    def __init__(self, src_lens: Sequence[int] | np.ndarray, tgt_lens: Sequence[int] | np.ndarray,
                 batch_tokens: int, shuffle: bool = True, seed: int = 1, num_replicas: int = 1, rank: int = 0) -> None:
        # int32 to keep large corpora small
        src, tgt = np.asarray(src_lens, dtype=np.int32), np.asarray(tgt_lens, dtype=np.int32)
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} source lengths but {len(tgt)} target lengths")
        if batch_tokens <= 0 or not 0 <= rank < num_replicas:
            raise ValueError(f"need batch_tokens > 0 and 0 <= rank < num_replicas, got {batch_tokens}, "
                             f"{rank}, {num_replicas}")
        self.batch_tokens, self.shuffle, self.seed = batch_tokens, shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch, self.position = 0, 0
        index = np.int32 if len(src) < 2**31 else np.int64
        perm = np.random.default_rng(seed).permutation(len(src)).astype(index)
        order = perm[_stable_order(src[perm], tgt[perm])]
        del perm
        self.batches = BatchList(order, _greedy_cuts(np.maximum(src, tgt)[order] + 1, batch_tokens))

    def __len__(self) -> int:
        return -(-len(self.batches) // self.num_replicas)

    def _epoch_order(self) -> list[int]:
        """Numbers of this rank's batches for the current epoch, in order."""
        n = len(self.batches)
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            order = list(range(n))
        if self.num_replicas > 1 and n:
            total = len(self) * self.num_replicas
            order = (order * -(-total // n))[:total][self.rank::self.num_replicas]
        return order

    def __iter__(self) -> Iterator[list[int]]:
        order = self._epoch_order()
        for k in range(self.position, len(order)):
            # the last batch completes the epoch, so a state saved after it resumes at the next
            self.epoch, self.position = (self.epoch + 1, 0) if k + 1 == len(order) else (self.epoch, k + 1)
            yield self.batches[order[k]]

    def state_dict(self) -> dict:
        """Epoch, position in it, and what identifies the batching."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "num_batches": len(self.batches),
                "num_replicas": self.num_replicas, "rank": self.rank}

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by `state_dict`."""
        mine = self.state_dict()
        for key in ("seed", "num_batches", "num_replicas"):
            if state[key] != mine[key]:
                raise ValueError(f"sampler state has {key}={state[key]} but this sampler has {mine[key]}: "
                                 "the data or batching settings changed")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def padding_fraction(sampler: TokenBatchSampler, src_lens: Sequence[int] | np.ndarray,
                     tgt_lens: Sequence[int] | np.ndarray) -> float:
    """Share of padding positions in the source and target tensors of all the sampler's batches."""
    order, bounds = sampler.batches.order, sampler.batches.bounds
    if not len(order):
        return 0.0
    src, tgt = np.asarray(src_lens)[order] + 1, np.asarray(tgt_lens)[order] + 1
    sizes = np.diff(bounds)
    padded = int(np.sum(sizes * (np.maximum.reduceat(src, bounds[:-1]) + np.maximum.reduceat(tgt, bounds[:-1]))))
    return 1.0 - int(src.sum() + tgt.sum()) / padded


@dataclass
class Batch:
    """A padded batch: source with EOS, teacher-forcing input (BOS + y) and output (y + EOS)."""

    src: torch.Tensor  # (B, S) long
    src_mask: torch.Tensor  # (B, S) bool, True on real tokens
    tgt_in: torch.Tensor  # (B, T) long
    tgt_out: torch.Tensor  # (B, T) long, padding after EOS
    n_src_tokens: int
    n_tgt_tokens: int
    src_lengths: torch.Tensor  # (B,) long, on the CPU (GRU packing needs it there)
    tgt_positions: torch.Tensor  # (N,) long, flat indices into B * T of real target tokens

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The tensors on `device` (but `src_lengths`)."""
        return dataclasses.replace(self, **{name: getattr(self, name).to(device, non_blocking=non_blocking)
                                            for name in _DEVICE_FIELDS})

    def pin_memory(self) -> Batch:
        """The tensors in page-locked memory, for asynchronous copies."""
        return dataclasses.replace(self, **{name: getattr(self, name).pin_memory() for name in _DEVICE_FIELDS})


_DEVICE_FIELDS = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_positions")


def collate(pairs: Sequence[tuple[np.ndarray, np.ndarray]], pad_id: int = PAD_ID) -> Batch:
    """Pad (source ids, target ids) pairs, given without BOS/EOS, into a Batch."""
    src_lens = np.array([len(s) + 1 for s, _ in pairs], dtype=np.int64)
    tgt_lens = np.array([len(t) + 1 for _, t in pairs], dtype=np.int64)
    src = np.full((len(pairs), src_lens.max()), pad_id, dtype=np.int64)  # (B, S)
    tgt_in = np.full((len(pairs), tgt_lens.max()), pad_id, dtype=np.int64)  # (B, T)
    tgt_out = tgt_in.copy()  # (B, T)
    for row, (s, t) in enumerate(pairs):
        src[row, :len(s)], src[row, len(s)] = s, EOS_ID
        tgt_in[row, 0], tgt_in[row, 1:len(t) + 1] = BOS_ID, t
        tgt_out[row, :len(t)], tgt_out[row, len(t)] = t, EOS_ID
    lengths = torch.from_numpy(src_lens)  # (B,)
    src_mask = torch.arange(src.shape[1])[None, :] < lengths[:, None]  # (B, S)
    positions = np.flatnonzero(np.arange(tgt_out.shape[1])[None, :] < tgt_lens[:, None])  # (N,)
    return Batch(torch.from_numpy(src), src_mask, torch.from_numpy(tgt_in), torch.from_numpy(tgt_out),
                 int(src_lens.sum()), int(tgt_lens.sum()), lengths, torch.from_numpy(positions))


T = TypeVar("T")


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """`items`, produced up to `depth` ahead by a background thread whose errors are raised here."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    closed = threading.Event()
    end = object()

    def offer(entry: tuple) -> bool:
        """Queue `entry`; False once the consumer has gone."""
        while not closed.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((item, None)):
                    return
            offer((end, None))
        except BaseException as err:  # raised by the consumer
            offer((end, err))

    worker = threading.Thread(target=produce, name="nmt-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, err = ready.get()
            if err is not None:
                raise err
            if item is end:
                return
            yield item
    finally:
        closed.set()


def _until(sampler: TokenBatchSampler, max_epochs: int) -> Iterator[list[int]]:
    """`sampler`'s batches until `max_epochs` epochs are complete (0: no end)."""
    while not 0 < max_epochs <= sampler.epoch:
        yield from sampler


def stream_batches(split: Split, sampler: TokenBatchSampler, pad_id: int, device: torch.device,
                   max_epochs: int = 0) -> Iterator[Batch]:
    """The batches of `sampler` over `split` on `device`. Off the CPU a thread builds them ahead from a copy of the
    sampler (`sampler` follows what is handed out, for resuming) and each is copied one batch early."""

    def build(indices: list[int]) -> Batch:
        return collate([(split.src[i], split.tgt[i]) for i in indices], pad_id)

    if device.type == "cpu":
        for indices in _until(sampler, max_epochs):
            yield build(indices)
        return
    pin = device.type == "cuda"
    ahead = prefetch(build(indices).pin_memory() if pin else build(indices)
                     for indices in _until(copy.copy(sampler), max_epochs))
    follow = _until(sampler, max_epochs)
    staged = None
    for batch in ahead:
        moved = batch.to(device, non_blocking=True)
        if staged is not None:
            next(follow)
            yield staged
        staged = moved
    if staged is not None:
        next(follow)
        yield staged
