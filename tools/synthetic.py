"""Make a synthetic corpus with nmt-translate and commit what it wrote, so that a later session need not make it again.

Usage:
    python -m tools.synthetic make NAME --beside TEXT -- NMT_TRANSLATE_ARGS...
    python -m tools.synthetic restore NAME [OUTPUT]
    python -m tools.synthetic report [--check]

`make` runs `nmt-translate NMT_TRANSLATE_ARGS` (which must name -i and -o files), timed, then stores the output it
wrote in results/synthetic/NAME/: gzipped parts of at most PART_LINES lines (each well under 2 MB; concatenated they
are one gzip file of the whole) and manifest.json: the command, its seconds and lines per second, what else ran on
the machine (--beside), the input's and output's sha256 and line counts, each model's final checkpoint and sha256,
the commit, the machine and the date. Only nmt's own output is stored, never the text it translated. A translation
that goes on from a stopped one's OUTPUT.partial is timed over the lines it translated itself (`resumed_at_line`).
`restore` writes the corpus back (default: the -o path of its command) and checks its sha256.
`report` writes what the stored corpora cost into docs/training.md (between the recipe-costs markers): each
corpus' search, lines and time, the archived trainings of the recipe's models (updates, minutes, machine) and the
decoding speed benchmarks.decode measured for the models that made the corpora (greedy, beam and sampling);
`--check` exits 1 when the block is stale.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import re
import shlex
import sys
from pathlib import Path
from time import monotonic
from typing import Any

from benchmarks.common import (
    RESULTS,
    ROOT,
    arguments,
    cell,
    code_commit,
    cpu_model,
    markdown_row,
    now,
    prog,
    read_json,
    table_header,
    write_or_check,
)
from nmt.checkpoint import find_checkpoint
from nmt.cli import command, translate_main
from nmt.engines.ctranslate2 import is_export
from nmt.errors import DataError, FileError
from nmt.fileio import atomic_output, sha256_file, write_json
from nmt.loader import model_inputs
from nmt.run.folder import read_metrics
from tools.archive import RESULTS as ARCHIVE

MODULE = "tools.synthetic"
STORE = ROOT / "results" / "synthetic"
PART_LINES = 40_000  # about 1 MB gzipped of captions
DOCS = ROOT / "docs" / "training.md"
START, END = "<!-- recipe-costs:start -->", "<!-- recipe-costs:end -->"
RESUMED = re.compile(r"^resuming at line ([0-9,]+):", re.MULTILINE)  # nmt-translate's line when it goes on


class _Tee:
    """A text stream that writes through to `stream` and keeps a copy."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.kept = stream, []

    def write(self, text: str) -> int:
        self.kept.append(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno: the real stream's
        return getattr(self.stream, name)


def _translate_args(args: list[str]) -> argparse.Namespace:
    """The models, input and output an nmt-translate command line names."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-c", "--checkpoint", action="append", default=[])
    parser.add_argument("-i", "--input")
    parser.add_argument("-o", "--output")
    named, _ = parser.parse_known_args(args)
    if not (named.checkpoint and named.input and named.output):
        raise DataError("the nmt-translate command must name -c MODEL, -i FILE and -o FILE")
    return named


def _lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def _shown(path: Path) -> str:
    """A path as the manifest names it: relative to the repository when inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def pack(output: Path, folder: Path) -> list[dict[str, Any]]:
    """`output` as gzipped parts of PART_LINES lines in `folder` (earlier parts removed); the parts' records."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("part-*.gz"):
        old.unlink()
    parts: list[dict[str, Any]] = []
    with open(output, "rb") as source:
        while chunk := [line for _, line in zip(range(PART_LINES), source)]:
            path = folder / f"part-{len(parts) + 1:03d}.gz"
            with atomic_output(path, "wb") as handle:  # mtime 0: the same text gives the same bytes
                handle.write(gzip.compress(b"".join(chunk), compresslevel=9, mtime=0))
            parts.append({"file": path.name, "lines": len(chunk), "bytes": path.stat().st_size,
                          "sha256": sha256_file(path)})
    return parts


def make(name: str, beside: str, args: list[str]) -> int:
    named = _translate_args(args)
    folder = STORE / name
    said = _Tee(sys.stderr)
    started = monotonic()
    with contextlib.redirect_stderr(said):
        status = translate_main(args)
    seconds = monotonic() - started
    if status:
        return status
    output, source = Path(named.output), Path(named.input)
    lines = _lines(output)
    resumed = RESUMED.search("".join(said.kept))
    first = int(resumed.group(1).replace(",", "")) if resumed else 1  # the input line this run started at
    translated = lines - (first - 1)  # a line per input line (--split-sentences off or on)
    models = [{"model": path, "checkpoint": _shown(find_checkpoint(path)), "sha256": sha256_file(find_checkpoint(path))}
              if not is_export(Path(path)) else
              {"model": path, "files": [{"path": _shown(p), "sha256": sha256_file(p)} for _, p in model_inputs(path)]}
              for path in named.checkpoint]
    manifest = {
        "name": name, "date": now(), "command": shlex.join(["nmt-translate", *args]), "commit": code_commit(),
        "archived_by": shlex.join(["python", "-m", MODULE, "make", name, "--beside", beside, "--", *args]),
        "machine": {"cpu": cpu_model(), "beside": beside},
        "seconds": round(seconds, 1), "lines_per_s": round(translated / seconds, 2),
        **({"resumed_at_line": first, "lines_translated": translated} if resumed else {}),
        "input": {"path": named.input, "lines": _lines(source), "sha256": sha256_file(source)},
        "output": {"path": named.output, "lines": lines, "sha256": sha256_file(output)},
        "models": models, "parts": pack(output, folder),
    }
    write_json(folder / "manifest.json", manifest)
    print(f"{translated:,} lines in {seconds:,.0f} s ({manifest['lines_per_s']} lines/s) -> {folder}")
    return 0


def restore(name: str, output: str | None) -> int:
    folder = STORE / name
    manifest = read_json(folder / "manifest.json")
    target = Path(output or manifest["output"]["path"])
    digest = hashlib.sha256()
    with atomic_output(target, "wb") as handle:
        for part in manifest["parts"]:
            if sha256_file(folder / part["file"]) != part["sha256"]:
                raise FileError(f"{folder / part['file']}: its sha256 is not the manifest's")
            text = gzip.decompress((folder / part["file"]).read_bytes())
            digest.update(text)
            handle.write(text)
        if digest.hexdigest() != manifest["output"]["sha256"]:
            raise FileError(f"{folder}: the parts together are not the corpus the manifest names")
    print(f"{manifest['output']['lines']:,} lines -> {target}")
    return 0


def _search(args: list[str], stored: dict[str, Any] | None) -> str:
    """How an nmt-translate command line searched: sampling, greedy or beam search, and its length penalty; the
    beam and penalty the command left to the model are the `stored` ones of its archived run, when there is one."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--beam", type=int)
    parser.add_argument("--sampling", action="store_true")
    parser.add_argument("--seed")
    parser.add_argument("--length-penalty")
    named, _ = parser.parse_known_args(args)
    if named.sampling:
        words = "sampling" + (f" (seed {named.seed})" if named.seed else "")
    elif named.beam == 1:
        words = "greedy"
    elif named.beam or not stored:
        words = f"beam {named.beam}" if named.beam else "the model's beam search"
    else:
        words = f"beam {stored['beam']} (the model's)"
    penalty = named.length_penalty or (stored and f"{stored['length_penalty']:g} (the model's)")
    return words + (f", length penalty {penalty}" if penalty and not (named.sampling or named.beam == 1) else "")


def _members(models: list[dict[str, Any]]) -> str:
    names = [Path(m["model"]).name for m in models]
    return f"`{names[0]}`" if len(names) == 1 else f"ensemble of {len(names)}: " + ", ".join(f"`{n}`" for n in names)


def _archived(archive: Path) -> dict[str, dict[str, Any]]:
    """The archived runs (results/multi30k/<name>/run.json) by their checkpoint's sha256."""
    runs = (read_json(path) for path in sorted(archive.glob("*/run.json")))
    return {run["sha256"]: run for run in runs if run.get("kind") == "run"}


def _corpus_row(manifest: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str:
    models = manifest["models"]
    stored = runs.get(models[0].get("sha256"), {}).get("decode") if len(models) == 1 else None
    timed = manifest.get("lines_translated", manifest["output"]["lines"])
    minutes = f"{manifest['seconds'] / 60:,.1f}"
    if "resumed_at_line" in manifest:
        minutes += f" (the last {timed:,} lines: resumed at line {manifest['resumed_at_line']:,})"
    args = shlex.split(manifest["command"])[1:]
    return markdown_row([f"`{manifest['name']}`", _members(models), _search(args, stored),
                         f"{manifest['output']['lines']:,}", minutes, cell(manifest["lines_per_s"], ",.0f"),
                         f"{manifest['machine']['cpu']}: {manifest['machine']['beside']}"])


def _speeds(manifests: list[dict[str, Any]], results: Path) -> list[str]:
    """Rows of benchmarks.decode's batched speeds for the models that made a stored corpus."""
    made_by = {tuple(m["checkpoint"] for m in manifest["models"]): manifest["models"][0]["sha256"]
               for manifest in manifests if all("checkpoint" in m for m in manifest["models"])}
    rows = []
    for path in sorted(results.glob("decode_*.json")):
        bench = read_json(path)
        members, searches = tuple(bench.get("members", ())), bench.get("searches", {})
        if made_by.get(members) != bench.get("checkpoint_sha256") or "sampling" not in searches:
            continue
        rate = {name: search["batched"]["sentences_per_s"] for name, search in searches.items()}
        beam = next(name for name in searches if name.startswith("beam"))
        sentences = searches["greedy"]["batched"]["sentences"]
        rows.append(markdown_row([
            _members([{"model": m.split("/checkpoints/")[0]} for m in members]),
            f"{bench['split']}, {sentences:,}", cell(rate["greedy"]),
            f"{rate[beam]:,.0f} ({searches[beam]['beam']})", cell(rate["sampling"]),
            f"{rate[beam] / rate['greedy']:.2f}", f"{rate['sampling'] / rate['greedy']:.2f}",
            f"{bench['machine']['cpu']}, {bench['threads']} threads, length penalty {bench['length_penalty']:g}",
            f"`{path.name}`"]))
    return rows


def _trainings(manifests: list[dict[str, Any]], runs: dict[str, dict[str, Any]], archive: Path) -> list[str]:
    """Rows of the recipe's archived trainings: the models that made a stored corpus and the runs of its configs."""
    made: dict[str, list[str]] = {}
    for manifest in manifests:
        for model in manifest["models"]:
            made.setdefault(model.get("sha256", ""), []).append(f"`{manifest['name']}`")
    rows = []
    for sha, run in sorted(runs.items(), key=lambda item: item[1]["date"]):
        if sha in made or " configs/recipe/" in f" {run['training_command']}":
            logged = read_metrics(archive / run["name"] / "metrics.jsonl")  # archived beside run.json
            trained = max((record["step"] for record in logged), default=run["updates"])
            threads = f"{run['threads']} thread" + ("s" if run["threads"] > 1 else "")
            rows.append(markdown_row([
                f"`{run['name']}`", ", ".join(made.get(sha, [])) or "–", f"{trained:,}", f"{run['updates']:,}",
                f"{run['training_minutes']:,.0f}", f"{run['hardware']}, {threads}", run["beside"]]))
    return rows


def report(store: Path, results: Path, archive: Path) -> str:
    """The recipe-costs block: each stored corpus, the trainings of the recipe's models, then the decoding speeds
    of the models that made the corpora."""
    manifests = [read_json(path) for path in sorted(store.glob("*/manifest.json"))]
    if not manifests:
        return "No synthetic corpus is stored.\n"
    runs = _archived(archive)
    lines = [*table_header(["corpus", "translated by", "search", "lines", "minutes", "lines/s", "machine"],
                           "lllrrrl"),
             *(_corpus_row(m, runs) for m in manifests)]
    trainings = _trainings(manifests, runs, archive)
    if trainings:
        lines += ["", "The recipe's archived trainings (each run's `run.json` and `metrics.jsonl`; minutes of the "
                  "whole training, wall clock):", "",
                  *table_header(["model", "translated", "updates trained", "final model's", "minutes", "machine",
                                 "beside it"], "llrrrll"),
                  *trainings]
    speeds = _speeds(manifests, results)
    if speeds:
        lines += ["", "The same models' decoding speed (benchmarks.decode, batched, sentences/s):", "",
                  *table_header(["models", "split, sentences", "greedy", "beam (size)", "sampling", "beam / greedy",
                                 "sampling / greedy", "machine", "evidence"], "llrrrrrll"),
                  *speeds]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The action and its arguments; after `--`, nmt-translate's arguments (as `translate`)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    made = sub.add_parser("make", help="translate with nmt-translate (the arguments after --) and store the output")
    made.add_argument("name", help="folder under results/synthetic/")
    made.add_argument("--beside", required=True, help="what else ran on the machine meanwhile")
    back = sub.add_parser("restore", help="write a stored corpus back")
    back.add_argument("name")
    back.add_argument("output", nargs="?")
    costs = sub.add_parser("report", help=f"write what the stored corpora cost into {DOCS.relative_to(ROOT)}")
    costs.add_argument("--check", action="store_true", help="exit 1 if the block is not current")
    args = parser.parse_args(argv[:cut])
    args.translate = argv[cut + 1:]
    if args.action == "make":
        try:
            _translate_args(args.translate)
        except DataError as err:
            parser.error(str(err))
    return args


@command
def main(argv: list[str] | None = None) -> int:
    args = parse_args(arguments(argv))
    if args.action == "restore":
        return restore(args.name, args.output)
    if args.action == "report":
        return write_or_check(DOCS, START, END, report(STORE, RESULTS, ARCHIVE), args.check, "recipe costs",
                              f"python -m {MODULE} report")
    return make(args.name, args.beside, args.translate)


if __name__ == "__main__":
    sys.exit(main())
