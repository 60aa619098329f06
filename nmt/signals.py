"""Graceful stop: the first SIGINT or SIGTERM asks training to stop after the current update; a second one
stops at once."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # signal numbers received while `graceful_stop` is active


class Interrupted(BaseException):
    """A second signal: leave at once (a BaseException, so only the command wrapper catches it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def exit_status(signum: int) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (130 SIGINT, 143 SIGTERM)."""
    return 128 + signum


def signal_name(signum: int) -> str:
    """SIGINT, SIGTERM, ..."""
    return signal.Signals(signum).name


def stop_signal() -> int:
    """The first signal received while `graceful_stop` is active, or 0: the trainer's 'stop requested' flag."""
    return _received[0] if _received else 0


def _handle(signum: int, _frame: FrameType | None) -> None:
    _received.append(signum)
    if len(_received) > 1:
        raise Interrupted(signum)
    print(f"\n{signal_name(signum)}: finishing the current update and saving last.pt "
          "(send it again to stop at once)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def graceful_stop() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as above inside the block; the previous handlers come back afterwards."""
    _received.clear()
    previous = {signum: signal.signal(signum, _handle) for signum in HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
