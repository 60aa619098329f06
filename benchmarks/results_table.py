"""Regenerate the Multi30k results tables in README.md from the committed reports in results/multi30k/.

Usage: python -m benchmarks.results_table [--results results/multi30k] [--readme README.md] [--check]

Each results/multi30k/<config>/ folder holds the test report (eval_test.json), the run's log (metrics.jsonl,
which gives the epochs, updates and training time), the translations (test.hyp.en) and run.json: the exact
command and the hardware it was trained on. The config of the same name in configs/ says whether the row
belongs to the full-length table or to a fixed-budget one (train.max_minutes set: one table per budget).
Each row also gives the `nmt-evaluate` command that reproduces its scores from the run folder: every decoding
setting the report records as used is spelled out as a flag, whatever the checkpoint holds. The README block
between <!-- results:start --> and <!-- results:end --> is rewritten; --check only reports whether it is
current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
    arguments,
    blamed,
    finite,
    markdown_row,
    prog,
    read_json,
    table_header,
    write_or_check,
)
from nmt.cli import command
from nmt.config import load_config
from nmt.errors import FileError
from nmt.fileio import describe_os_error
from nmt.rundir import RunDir, read_metrics

MODULE = "benchmarks.results_table"
START, END = "<!-- results:start -->", "<!-- results:end -->"
HEADER = table_header(["config", "params", "epochs / steps", "training time", "hardware", "beam / lp", "BLEU",
                       "BLEU-lc", "chrF", "TER", "training command", "scores reproduced by"], "lrrrlrrrrrll")
SOURCE_LIMIT = 250  # the source truncation of reports that do not record it
OLD_STOP = "bound"  # the beam stopping rule of reports that do not record it
NEWER_FIELDS = ("command", "engine", "members", "train")  # what an older report does not record
OLDER_NOTE = ("Older report: written before reports recorded the command, the engine, the ensemble members and the "
              "training summary (it has the checkpoint's sha256 and the decoding settings); its translations are "
              "re-scored by `make check` like the others.")


def evaluate_command(name: str, report: dict) -> str:
    """The nmt-evaluate command that decodes the report's split with exactly the report's settings."""
    d = report["decode"]
    flags = ["--split", report["split"], "--beam", str(d["beam"]), "--length-penalty", str(d["length_penalty"]),
             "--max-len-a", str(d["max_len_a"]), "--max-len-b", str(d["max_len_b"])]
    if d.get("stop", OLD_STOP) != "finished":
        flags += ["--stop", d.get("stop", OLD_STOP)]
    if d.get("max_source_tokens", SOURCE_LIMIT) != SOURCE_LIMIT:
        flags += ["--max-source-tokens", str(d["max_source_tokens"])]
    if report.get("precision", "fp32") != "fp32":
        flags += ["--precision", report["precision"]]
    return " ".join(["nmt-evaluate", f"runs/{name}", *flags])


def _records(metrics: Path) -> list[dict[str, Any]]:
    """The records of a metrics log, each an object with an integer step; any other line is an error naming it."""
    try:
        metrics.stat()  # read_metrics takes a missing log for an empty one; a results folder needs its log
        records = read_metrics(metrics)
    except OSError as err:
        raise FileError(describe_os_error(err)) from None
    if records.skipped:
        raise FileError(f"{metrics}: line {records.skipped[0]} is not a JSON record with an integer step (cut off?)")
    if not records:
        raise FileError(f"{metrics}: no records")
    return records


def _progress(metrics: Path) -> tuple[str, int, float]:
    """(epochs, updates, minutes) of the whole run, from its log; the validation closing epoch 1 gives the
    updates per epoch."""
    records = _records(metrics)
    last = records[-1]
    per_epoch = next((r["step"] for r in records if r.get("type") == "valid" and r.get("epoch") == 1), 0)
    epochs = f"{last['step'] / per_epoch:.1f}" if per_epoch else "–"
    with blamed(metrics):
        return epochs, last["step"], finite(last.get("elapsed"), "the last record's elapsed") / 60


def _row(folder: Path) -> tuple[float, float, str]:
    """(the run's train.max_minutes (0: no time budget), its BLEU, its Markdown row) for one results folder."""
    results = RunDir(folder)
    report_file, run_file = results.report("test"), folder / "run.json"
    report, run = read_json(report_file), read_json(run_file)
    minutes_budget = load_config(ROOT / "configs" / f"{folder.name}.yaml").train.max_minutes
    epochs, steps, minutes = _progress(results.metrics)
    with blamed(report_file):
        s, d = report["scores"], report["decode"]
        params = report["parameters"] if "parameters" in report else report["train"]["parameters"]  # older reports
        bleu, bleu_lc, chrf, ter = (finite(s[key], f"scores.{key}") for key in ("bleu", "bleu_lc", "chrf", "ter"))
        beam, penalty = (finite(d[key], f"decode.{key}") for key in ("beam", "length_penalty"))
        reproduce = evaluate_command(folder.name, report)
        size = finite(params, "parameters") / 1e6
    with blamed(run_file):
        hardware, trained_by = run["hardware"], run["command"]
    older = not all(key in report for key in NEWER_FIELDS)
    name = f"`{folder.name}`" + (" (older report)" if older else "")
    cells = [name, f"{size:.2f} M", f"{epochs} / {steps:,}", f"{minutes:.0f} min", hardware,
             f"{beam} / {penalty}", f"{bleu:.2f}", f"{bleu_lc:.2f}", f"{chrf:.2f}", f"{ter:.2f}", f"`{trained_by}`",
             f"`{reproduce}`"]
    return minutes_budget, bleu, markdown_row(cells)


def _title(minutes: float) -> str:
    """The line above the table of the runs with this train.max_minutes (0: the full-length runs)."""
    if not minutes:
        return "**Full-length runs** (the final model averages the best epoch checkpoints):"
    return (f"**Fixed budget: {minutes:g} minute{'' if minutes == 1 else 's'} of training on 2 CPU cores** "
            "(wall clock of the trainer, validations included):")


def tables(results: Path) -> str:
    """The generated Markdown: full-length runs first, then one table per time budget, each by BLEU."""
    try:
        folders = sorted(p for p in results.iterdir() if RunDir(p).report("test").exists())
    except OSError as err:
        raise FileError(f"--results {describe_os_error(err)}") from None
    if not folders:
        raise FileError(f"--results {results}: no <config>/eval_test.json report in the folder")
    groups: dict[float, list[tuple[float, str]]] = {}
    for folder in folders:
        minutes, bleu, row = _row(folder)
        groups.setdefault(minutes, []).append((bleu, row))
    parts = []
    for minutes in sorted(groups):
        ranked = [row for _, row in sorted(groups[minutes], key=lambda r: -r[0])]
        parts += [_title(minutes), "", *HEADER, *ranked, ""]
    if any("(older report)" in row for rows in groups.values() for _, row in rows):
        parts += [OLDER_NOTE, ""]
    return "\n".join(parts) + "\n"


@command
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "multi30k", help="reports folder")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="README whose block is rewritten")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README block is not current")
    args = parser.parse_args(arguments(argv))
    return write_or_check(args.readme, START, END, tables(args.results), args.check, "results tables",
                          f"python -m {MODULE}")


if __name__ == "__main__":
    sys.exit(main())
