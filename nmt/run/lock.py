"""One training per run folder: an advisory lock file holding the owner's PID and host.

The lock is an `fcntl.flock` on `<run>/train.lock`, so the kernel releases it when its process ends in
any way, SIGKILL included; the PID and host written into the file only serve the messages.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from nmt.errors import FileError, RunLockError
from nmt.fileio import cause
from nmt.run.folder import RunDir


def _owner() -> str:
    return f"pid {os.getpid()} on host {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}"


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[str]:
    """Hold the run folder's lock inside the block; raise RunLockError when another process holds it.

    Yields the owner a previous holder left in the file when it ended without releasing the lock (killed), or "".
    """
    path = RunDir(run_dir).lock
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise FileError(f"{path}: cannot create the run lock ({cause(err)})") from None
    handle = os.fdopen(fd, "r+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = handle.read().strip() or "another process"
            raise RunLockError(f"{run_dir}: another nmt-train is training in this run folder ({holder}); "
                               "wait for it to end, stop it, or choose another name (--set name=...)") from None
        stale = handle.read().strip()  # a clean exit empties the file: text here means its owner was killed
        handle.seek(0)
        handle.truncate()
        handle.write(_owner() + "\n")
        handle.flush()
    except OSError as err:
        handle.close()
        raise FileError(f"{path}: cannot take the run lock ({cause(err)})") from None
    except BaseException:
        handle.close()
        raise
    try:
        yield stale
    finally:
        with contextlib.suppress(OSError):
            handle.seek(0)
            handle.truncate()
        handle.close()
