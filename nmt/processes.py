"""Which processes run: a process's liveness and its descendants, from /proc."""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def _state_and_parent(stat: Path) -> tuple[str, int] | None:
    """(state letter, parent pid) from /proc/<pid>/stat, or None once the process is gone."""
    try:  # after the last ")": the command's name may hold spaces and parentheses
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def is_running(pid: int) -> bool:
    """Whether process `pid` exists (as any user's) and is not a zombie."""
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
    """Every running descendant of `pid`, children first, those in sessions of their own (torchrun's workers)
    included; none without /proc."""
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
