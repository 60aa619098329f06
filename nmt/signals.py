"""Signals: SIGTERM unwinds like Ctrl-C; in training a first SIGINT or SIGTERM stops after the update, a second
at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM)
ECHO_SECONDS = 1.0  # under torchrun, a repeat within this time is the launcher passing it on
_received: list[tuple[int, float]] = []  # (signal number, monotonic time) during `graceful_stop`


class Interrupted(BaseException):
    """A signal that ends the command now (a BaseException, caught only by the command wrapper)."""

    def __init__(self, signum: int, again: bool = False) -> None:
        super().__init__(f"{'a second ' if again else ''}{signal_name(signum)}")
        self.signum = signum


def exit_status(signum: int) -> int:
    """The shell's exit status for a process ended by a signal: 128 + its number."""
    return 128 + signum


def signal_name(signum: int) -> str:
    """SIGINT, SIGTERM, ..."""
    return signal.Signals(signum).name


def stop_signal() -> int:
    """The first signal received during `graceful_stop`, or 0."""
    return _received[0][0] if _received else 0


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _echo(signum: int, now: float) -> bool:
    """Whether `signum` is torchrun passing on a signal the worker already received."""
    first, when = _received[0]
    return "TORCHELASTIC_RUN_ID" in os.environ and signum == first and now - when < ECHO_SECONDS


def _handle(signum: int, _frame: FrameType | None) -> None:
    now = time.monotonic()
    if _received and _echo(signum, now):
        return
    _received.append((signum, now))
    if len(_received) > 1:
        raise Interrupted(signum, again=True)
    print(f"\n{signal_name(signum)}: finishing the current update and saving last.pt "
          "(send it again to stop at once)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _handlers(handler: signal.Handlers | object, signums: tuple[int, ...]) -> Iterator[None]:
    """Install `handler` for `signums` inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def terminate_cleanly() -> contextlib.AbstractContextManager:
    """SIGTERM raises Interrupted inside the block, so `finally` clauses and atomic outputs clean up."""
    return _handlers(_terminate, (signal.SIGTERM,))


@contextlib.contextmanager
def graceful_stop() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as training wants inside the block."""

    _received.clear()
    try:
        with _handlers(_handle, HANDLED):
            yield
    finally:
        _received.clear()
