"""The worker pool of the two preparation passes: how many workers, how they start, and results in order."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

from nmt.config import DataConfig


def worker_count(d: DataConfig) -> int:
    """data.workers, or the CPU cores this process may use."""
    return d.workers or len(os.sched_getaffinity(0))


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[Executor | None]:
    """A pool of `workers` processes for one pass (None: work in this process), shut down at the end.

    fork: the workers share the parent's imports and never re-run the caller's main module (as spawn would).
    But not once CUDA (or NCCL, which needs it) is initialised: a forked child of a process with CUDA's threads
    can deadlock, so such a process (nmt-train under torchrun on GPUs) spawns its workers.
    Each pass has its own pool so that no worker is alive while sentencepiece trains (the largest allocation).
    """
    if workers <= 1:
        yield None
        return
    forkable = "fork" in multiprocessing.get_all_start_methods() and not _cuda_initialized()
    method = "fork" if forkable else "spawn"
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method))
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


def _cuda_initialized() -> bool:
    """Whether this process has initialised CUDA (without importing torch when nothing has)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def ordered(pool: Executor | None, fn: Callable, tasks: Iterable[tuple], window: int) -> Iterator[Any]:
    """fn(*task) for each task, in order, with at most `window` tasks in flight (so memory stays bounded)."""
    if pool is None:
        for task in tasks:
            yield fn(*task)
        return
    pending: deque = deque()
    for task in tasks:
        pending.append(pool.submit(fn, *task))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
