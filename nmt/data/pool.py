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
    """A pool of `workers` processes for one pass (None: work in this process).

    Forks (no re-import of the main module) unless CUDA is initialised, where a fork can deadlock and it spawns.
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
    """Whether this process has initialised CUDA (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def ordered(pool: Executor | None, fn: Callable, tasks: Iterable[tuple], window: int) -> Iterator[Any]:
    """fn(*task) for each task, in order, at most `window` in flight."""

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
