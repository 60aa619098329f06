"""The commands that committed results record, checked against today's code.

A result records the command that measured it. `problem` says why a recorded command would not run today (a
module, script, make target or nmt command that does not exist, or arguments its parser refuses), so that
`make check` fails when a rename leaves a published command behind: the rename rewrites the records with it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import re
import shlex
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT

RECORD_KEYS = ("command", "training_command", "archived_by")  # the keys under which results record a command
OWN_MODULES = ("benchmarks.", "nmt.", "tools.")


def _makefile_targets(root: Path) -> set[str]:
    text = (root / "Makefile").read_text(encoding="utf-8") if (root / "Makefile").is_file() else ""
    return {found.group(1) for line in text.splitlines() if (found := re.match(r"([\w.-]+)\s*:(?!=)", line))}


def _nmt_commands() -> set[str]:
    """The console scripts the installed nmt package provides (nmt-train, nmt-evaluate, ...)."""
    return {ep.name for ep in entry_points(group="console_scripts") if ep.value.startswith("nmt.")}


def _module_problem(name: str, args: list[str]) -> str | None:
    """Why `python -m name args` would not run: no such module of ours, or arguments its parse_args refuses."""
    if not name.startswith(OWN_MODULES):
        return f"module {name} is not one of this repository's"
    try:
        module = importlib.import_module(name)
    except ImportError:
        return f"module {name} does not exist"
    parse = getattr(module, "parse_args", None)
    if parse is None:
        return f"module {name} has no parse_args to check the arguments against"
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            parse(args)
        except SystemExit:
            said = errors.getvalue().strip().splitlines()
            return f"python -m {name} refuses its arguments ({said[-1] if said else 'no message'})"
    return None


def problem(command: str, root: Path = ROOT) -> str | None:
    """Why `command` (as a result records it) would not run today from `root`, or None when it would.

    Only the part before a `;` outside quotes is a command; a record may add how a run went on after it (resumed
    with ...).
    """
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    try:
        words = list(itertools.takewhile(lambda word: word != ";", lexer))
    except ValueError as err:
        return f"cannot be split into words ({err})"
    if not words:
        return "is empty"
    if words[:2] == ["python", "-m"] and len(words) > 2:
        return _module_problem(words[2], words[3:])
    if words[0] == "python" and len(words) > 1:
        return None if (root / words[1]).is_file() else f"{words[1]} does not exist"
    if words[0] == "make":
        targets = [word for word in words[1:] if "=" not in word and not word.startswith("-")]
        unknown = [target for target in targets if target not in _makefile_targets(root)]
        return f"the Makefile has no target {', '.join(unknown)}" if unknown else None
    if Path(words[0]).name in _nmt_commands():  # a benchmark's own runs record the venv's full path
        return None
    return f"{words[0]} is not a module, script, make target or nmt command of this repository"


def recorded(record: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(JSON path, command) for every command a result records, at any depth."""
    if isinstance(record, dict):
        for key, value in record.items():
            path = f"{where}.{key}" if where else key
            if key in RECORD_KEYS and isinstance(value, str):
                yield path, value
            else:
                yield from recorded(value, path)
    elif isinstance(record, list):
        for i, value in enumerate(record):
            yield from recorded(value, f"{where}[{i}]")
