"""Which processes run: a process's liveness and its tree of descendants, read in one place (the data store's
clean-up of killed builds, the GPU check's process supervisor and the tests call it)."""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def _state_and_parent(stat: Path) -> tuple[str, int] | None:
    """(state letter, parent pid) from a /proc/<pid>/stat file; None once the process is gone. The fields are
    read after the last ")", since the command's name in parentheses may itself hold spaces and parentheses."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def is_running(pid: int) -> bool:
    """Whether process `pid` runs: it exists (also as another user's) and, where /proc tells, is not a zombie
    waiting for its parent to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not _PROC.is_dir():
        return True
    found = _state_and_parent(_PROC / str(pid) / "stat")
    return found is not None and found[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every running descendant of `pid` (from /proc; none where there is no /proc), children first: also those
    that started sessions of their own (torchrun's workers)."""
    children: dict[int, list[int]] = {}
    for stat in _PROC.glob("[0-9]*/stat"):
        found = _state_and_parent(stat)
        if found is not None and found[0] != "Z":
            children.setdefault(found[1], []).append(int(stat.parent.name))
    tree, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        tree.append(child)
        todo.extend(children.get(child, []))
    return tree
