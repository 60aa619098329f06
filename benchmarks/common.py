"""What the benchmarks and report scripts share: paths, the command-line preamble, timing, the machine's facts,
atomic JSON results, Markdown tables and generated blocks, and reading the report files tables are made from.

Every module of this package runs from the repository root as `python -m benchmarks.<name>`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch

from nmt.cli import Parser, number
from nmt.config import AT_LEAST_ONE, Range
from nmt.errors import FileError
from nmt.fileio import atomic_output, describe_os_error, write_json
from nmt.run.folder import RunDir
from nmt.utils import resolve_device

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
T = TypeVar("T")

# ---------------------------------------------------------------------------------------------- command line


def arguments(argv: list[str] | None) -> list[str]:
    """The arguments a `main(argv)` works on: `argv`, or the command line's when None."""
    return sys.argv[1:] if argv is None else argv


def prog(module: str) -> str:
    """The name a module's --help and errors show: how it is run."""
    return f"python -m {module}"


def add_out_dir(parser: argparse.ArgumentParser, help: str = "where the JSON goes") -> None:
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help=help)


def add_device(parser: argparse.ArgumentParser, precision: bool = True) -> None:
    """--device of a measurement, and its --precision."""
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    if precision:
        parser.add_argument("--precision", default="fp32", choices=tuple(DTYPES))


def add_threads(parser: argparse.ArgumentParser, help: str) -> None:
    """--threads: torch's CPU threads, 0 for torch's own choice."""
    parser.add_argument("--threads", type=number(Range(0.0, 1024.0), integer=True), default=0, help=help)


def measurement_parser(module: str, doc: str | None, *, precision: bool = False,
                       threads: str = "CPU threads (default: torch's choice)",
                       out_dir: str = "where the JSON goes") -> Parser:
    """The command line of a measurement of a model, named as it runs (`module`) and summed up by the first line of
    `doc`, with the options they all take: --device (and --precision), --threads and --out-dir."""
    parser = Parser(prog=prog(module), description=(doc or module).splitlines()[0])
    add_device(parser, precision)
    add_threads(parser, threads)
    add_out_dir(parser, out_dir)
    return parser


def add_split(parser: argparse.ArgumentParser) -> None:
    """--split: the split of the model's dataset a measurement reads."""
    parser.add_argument("--split", default="test", help="split of the model's dataset (default test: test2016)")


def add_beam(parser: argparse.ArgumentParser, help: str = "beam size (default 5)") -> None:
    """--beam: the beam size a measurement searches with, 5 unless given."""
    parser.add_argument("--beam", type=number(AT_LEAST_ONE, integer=True), default=5, help=help)


def set_threads(threads: int) -> None:
    """torch's CPU threads for this process (0: leave torch's choice)."""
    if threads:
        torch.set_num_threads(threads)


def begin(argv: list[str] | None,
          parse: Callable[[list[str]], argparse.Namespace]) -> tuple[list[str], argparse.Namespace, torch.device]:
    """A measurement's start: its arguments (the command line's when None), its flags parsed, torch's threads
    set from --threads, and the device --device names."""
    argv = arguments(argv)
    args = parse(argv)
    set_threads(args.threads)
    return argv, args, resolve_device(args.device)


def command_line(module: str, argv: list[str]) -> str:
    """The shell command that reruns `module` (a module of this package) with `argv`."""
    return shlex.join(["python", "-m", module, *argv])


def module_command(module: str, *args: str) -> list[str]:
    """The argv that runs `module` in a fresh interpreter (run with `module_env()`, from any folder)."""
    return [sys.executable, "-m", module, *args]


def module_env() -> dict[str, str]:
    """This environment with the repository on PYTHONPATH, so a child finds `benchmarks` and `nmt`."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_name(model: str | Path, fallback: str) -> str:
    """The run folder's name for a checkpoint inside a run's checkpoints/ folder, else `fallback` (the config's)."""
    model = Path(model)
    return RunDir.of(model).name if model.parent.name == RunDir.CHECKPOINTS else fallback


# ---------------------------------------------------------------------------------------------- timing


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op off CUDA), so that a clock reading includes it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(work: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """`work`'s result and its wall-clock seconds, the device synchronised before and after."""
    sync(device)
    start = time.perf_counter()
    result = work()
    sync(device)
    return result, time.perf_counter() - start


def matmul_size(device: torch.device) -> int:
    """The side of the square matmul whose speed is a device's peak: large enough to saturate it."""
    return 8192 if device.type == "cuda" else 2048


def matmul_peak(device: torch.device, precision: str, size: int, seconds: float) -> float:
    """FLOP/s of repeated square (size x size) matmuls in `precision`, timed for about `seconds`."""
    a = torch.randn(size, size, device=device).to(DTYPES[precision])
    b = torch.randn(size, size, device=device).to(DTYPES[precision])
    torch.mm(a, b)  # first call: kernel selection and allocation
    sync(device)
    runs, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        runs += 1
        if runs % 4 == 0 or device.type != "cuda":
            sync(device)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return 2.0 * size**3 * runs / elapsed


# ---------------------------------------------------------------------------------------------- the machine


def device_tag(device: torch.device, precision: str = "fp32") -> str:
    """'cpu' or the sanitised CUDA device name, plus the precision when it is not fp32 (file-name safe)."""
    name = "cpu" if device.type != "cuda" else torch.cuda.get_device_name(device)
    tag = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return tag if precision == "fp32" else f"{tag}_{precision}"


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KB


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo, else what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict[str, Any]:
    """What a benchmark figure depends on besides the code: CPU, threads, versions, accelerator."""
    info: dict[str, Any] = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                            "torch": torch.__version__, "python": platform.python_version(),
                            "platform": platform.platform()}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def checkout(tree: Path = ROOT) -> dict[str, Any]:
    """Where a checkout is, its commit and whether its tracked files, the measurements in benchmarks/results apart,
    differ from it (None: git cannot tell)."""
    def git(*words: str) -> str | None:
        done = subprocess.run(["git", "-C", str(tree), *words], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    return {"path": str(tree), "commit": git("rev-parse", "HEAD"), "modified": None if status is None else bool(status)}


def code_commit() -> str:
    """The commit of the code measuring, marked -dirty when its tracked files have changes."""
    tree = checkout()
    return f"{tree['commit']}-dirty" if tree["modified"] else str(tree["commit"])


def now() -> str:
    """The UTC time to the second, as results record it."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_result(path: Path, device: torch.device, command: str, result: dict[str, Any]) -> dict[str, Any]:
    """Write a benchmark's JSON with the date, the command line, the machine and the commit of the code measuring
    (`code_commit`); returns what was written."""
    record = {"date": now(), "command": command, "machine": machine_info(device), "commit": code_commit(), **result}
    write_json(path, record)
    return record


def finish(out: Path, device: torch.device, module: str, argv: list[str], result: dict[str, Any],
           summary: str = "") -> int:
    """A measurement's end: its JSON written to `out` (`write_result`, with `module`'s command line for `argv`),
    then `summary` and where the JSON went printed; the exit status, 0."""
    write_result(out, device, command_line(module, argv), result)
    print(f"{summary} -> {out}" if summary else f"-> {out}")
    return 0


# ---------------------------------------------------------------------------------------------- tables


def cell(value: float | None, fmt: str = ",.0f", missing: str = "-") -> str:
    """A table cell: `value` formatted, or `missing` when there is none."""
    return missing if value is None else format(value, fmt)


def markdown_row(cells: list[str]) -> str:
    """One row of a Markdown table."""
    return "| " + " | ".join(cells) + " |"


def table_header(columns: list[str], align: str) -> list[str]:
    """A Markdown table's first two lines: the column names, then each column's alignment ('l' or 'r')."""
    return [markdown_row(columns), "|" + "".join("---:|" if side == "r" else "---|" for side in align)]


def replace_block(path: Path, start: str, end: str, body: str, title: str = "") -> None:
    """Put `body` between the markers of `path`; a missing file is created with `title` and empty markers."""
    text = path.read_text(encoding="utf-8") if path.exists() else f"{title}\n\n{start}\n{end}\n"
    if start not in text or end not in text or text.index(start) > text.index(end):
        print(f"error: {path}: the markers {start} and {end} are missing", file=sys.stderr)
        raise SystemExit(1)
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    with atomic_output(path) as handle:  # a full disk leaves the file as it was, never cut short
        handle.write(f"{head}{start}\n{body}{end}{tail}")


def write_or_check(path: Path, start: str, end: str, body: str, check: bool, what: str, fix: str) -> int:
    """With `check`, 0 when `path` already holds `body` between the markers (else 1, saying that the command
    `fix` regenerates it); otherwise write it there. `what` names the block in the messages."""
    if check:
        current = f"{start}\n{body}{end}" in path.read_text(encoding="utf-8")
        if not current:
            print(f"{path}: {what}: stale; run `{fix}`", file=sys.stderr)
        return 0 if current else 1
    replace_block(path, start, end, body)
    print(f"{what} updated in {path}")
    return 0


# ---------------------------------------------------------------------------------------------- report files


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; a missing, unreadable or malformed file is a FileError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise FileError(describe_os_error(err)) from None
    except ValueError as err:  # not JSON, or not UTF-8
        raise FileError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise FileError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


@contextlib.contextmanager
def blamed(path: Path) -> Iterator[None]:
    """Report a missing or mistyped field met in the block as a FileError naming `path`."""
    try:
        yield
    except KeyError as err:
        raise FileError(f"{path}: no field {err}") from None
    except ValueError as err:
        raise FileError(f"{path}: {err}") from None
    except (TypeError, AttributeError, IndexError) as err:
        raise FileError(f"{path}: a field is not what this script reads ({err})") from None


def finite(value: Any, name: str) -> float:
    """`value` when it is a finite number, else a ValueError saying what `name` holds instead."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} is {json.dumps(value)}, not a finite number")
    return value
