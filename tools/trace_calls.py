"""The hops from a console command to a target function: what a reader follows to see where control goes.

Usage: python -m tools.trace_calls TARGET ENTRY -- ARGS...
e.g.   python -m tools.trace_calls nmt/trainer.py:train_step nmt.cli:train_main -- configs/sample_transformer.yaml
       python -m tools.trace_calls nmt/search.py:beam_search tools.trace_calls:translate_text -- RUN "Ein Hund."

Runs ENTRY (module:function, called with ARGS) under a profiler that sees only calls into nmt's own files, and
stops the process at the first call of TARGET (file:function, the file relative to the folder holding the
`nmt` package that was imported). It prints JSON: `hops`, one line per call made by a function on the call
chain that led to TARGET ("caller -> callee", file:qualified name, repeats in a row folded), their count,
the chain itself, and how many distinct nmt functions and files ran before TARGET. Pointing PYTHONPATH at
another checkout traces that one instead.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import nmt


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m tools.trace_calls", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="file:function that ends the trace, e.g. nmt/trainer.py:train_step")
    parser.add_argument("entry", help="module:function to call with the arguments after --, e.g. nmt.cli:train_main")
    return parser.parse_args(own), rest


class Tracer:
    """Records calls into nmt's files until the target's first call, then reports and ends the process."""

    def __init__(self, target: str) -> None:
        self.package = Path(nmt.__file__).resolve().parent
        self.root = self.package.parent
        self.target_file, self.target_name = target.split(":")
        self.functions: list[str] = []
        self.seen: set[str] = set()
        self.calls: list[tuple[int, CodeType, str]] = []  # (caller frame id, caller code, callee)

    def _ours(self, frame: FrameType | None) -> bool:
        return frame is not None and frame.f_code.co_filename.startswith(str(self.package) + os.sep)

    def name(self, code: CodeType) -> str:
        return f"{Path(code.co_filename).relative_to(self.root)}:{code.co_qualname}"

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self._ours(frame):
            return
        callee = self.name(frame.f_code)
        caller = frame.f_back
        while caller is not None and not self._ours(caller):
            caller = caller.f_back
        if caller is not None:
            self.calls.append((id(caller), caller.f_code, callee))
        if callee not in self.seen:
            self.seen.add(callee)
            self.functions.append(callee)
        if callee.split(":")[0] == self.target_file and frame.f_code.co_name == self.target_name:
            sys.setprofile(None)
            print(json.dumps(self.report(frame), indent=1))
            sys.stdout.flush()
            os._exit(0)

    def report(self, frame: FrameType) -> dict[str, Any]:
        """The hops made from the chain of frames that reached `frame`."""
        live: dict[int, CodeType] = {}
        chain: list[str] = []
        walk: FrameType | None = frame
        while walk is not None:
            live[id(walk)] = walk.f_code
            if self._ours(walk):
                chain.append(self.name(walk.f_code))
            walk = walk.f_back
        hops: list[str] = []
        for caller_id, code, callee in self.calls:
            line = f"{self.name(code)} -> {callee}"
            if live.get(caller_id) is code and (not hops or hops[-1] != line):
                hops.append(line)
        files = sorted({name.split(":")[0] for name in self.functions})
        return {"hops": hops, "hop_count": len(hops), "chain": chain[::-1], "functions_before": len(self.functions),
                "files_before": len(files), "files": files}


def translate_text(argv: list[str]) -> int:
    """An entry for the Python API's path: `nmt.load(MODEL).translate(TEXT)`, with ARGS MODEL TEXT."""
    model, text = argv
    nmt.load(model, device="cpu").translate(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(sys.argv[1:] if argv is None else argv)
    module, function = args.entry.split(":")
    entry = getattr(importlib.import_module(module), function)
    sys.setprofile(Tracer(args.target))
    status = entry(rest)
    sys.setprofile(None)
    print(f"{args.target} was never called (the command returned {status})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
