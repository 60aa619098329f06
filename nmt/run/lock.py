"""One training per run folder: an advisory lock file holding the owner's PID and host.

The lock is an `fcntl.flock` on `<run>/train.lock`, so the kernel releases it when its process ends in
any way, SIGKILL included; the PID and host written into the file only serve the messages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from nmt.errors import FileError, RunLockError
from nmt.fileio import cause, release_lock, take_lock
from nmt.run.folder import RunDir


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[str]:
    """Hold the run folder's lock inside the block; raise RunLockError when another process holds it.

    Yields the owner a previous holder left in the file when it ended without releasing the lock (killed), or "".
    """
    path = RunDir(run_dir).lock
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        handle, text = take_lock(path)
    except OSError as err:
        raise FileError(f"{path}: cannot take the run lock ({cause(err)})") from None
    if handle is None:
        raise RunLockError(f"{run_dir}: another nmt-train is training in this run folder ({text}); "
                           "wait for it to end, stop it, or choose another name (--set name=...)")
    try:
        yield text
    finally:
        release_lock(handle, path)
