"""Rebuild docs/training.md's table of the recipe's validation records, from the runs archived in results/multi30k/.

Usage: python -m tools.val_table [--results results/multi30k] [--details docs/training.md] [--check]

The recipe's choices are made on the validation split, and this table is where they are made: every archived
German→English run that read corpora beyond its dataset's pairs (data.train_corpora), with the greedy validation
BLEU and the validation loss its metrics.jsonl recorded every 1,000 updates, and their means over the validations of
a window of updates all the recipe's runs reached. Runs compare at equal updates because the learning rate
(inverse square root after the warmup) depends on the update alone, not on the budget; seeds of one recipe show how
far two runs differ by chance. The block lies between <!-- val:start --> and <!-- val:end -->; --check writes
nothing and exits 1 when it is not current.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, arguments, markdown_row, prog, table_header, write_or_check
from nmt.cli import command
from nmt.errors import FileError
from nmt.run.folder import RunDir, read_metrics
from tools.results_table import Model, corpora, read_models, recipe_models

MODULE = "tools.val_table"
START, END = "<!-- val:start -->", "<!-- val:end -->"
SHOWN = range(1000, 6001, 1000)  # the updates whose validation gets a column
WINDOW = (3000, 5000)  # the validations averaged: past the steep start, and reached by every run of the recipe


def validations(folder: Path) -> dict[int, dict[str, Any]]:
    """The `valid` records of an archived run's metrics.jsonl by update; a FileError when it has none."""
    path = RunDir(folder).metrics
    found = {r["step"]: r for r in read_metrics(path) if r.get("type") == "valid" and "bleu" in r}
    if not found:
        raise FileError(f"{path}: no validation record with a BLEU score")
    return found


def _mean(records: dict[int, dict[str, Any]], key: str, fmt: str) -> str:
    low, high = WINDOW
    if max(records) < high:  # stopped before the window's end
        return "–"
    return format(statistics.mean(record[key] for step, record in records.items() if low <= step <= high), fmt)


def _row(model: Model, records: dict[int, dict[str, Any]]) -> str:
    seed = model.run.get("seed", model.cfg.train.seed)
    return markdown_row([f"`{model.name}`", corpora(model.cfg).removeprefix(" + "), str(seed),
                         *(f"{records[step]['bleu']:.2f}" if step in records else "–" for step in SHOWN),
                         _mean(records, "bleu", ".2f"), _mean(records, "loss", ".3f")])


def table(results: Path) -> str:
    """The block: one row per archived recipe run (ensembles decode no validation during training), by group, then
    seed."""
    runs = sorted((m for m in recipe_models(read_models(results)) if m.kind == "run"),
                  key=lambda m: (len(m.cfg.data.train_corpora), m.group, m.run.get("seed", m.cfg.train.seed)))
    if not runs:
        return "No German→English run trained on more than Multi30k's pairs (data.train_corpora) is archived.\n"
    low, high = WINDOW
    window = f"{low:,}–{high:,}"
    lines = [f"Greedy BLEU on the validation split after the given updates, from each archived run's "
             f"`metrics.jsonl`; the mean of its validations from {low:,} to {high:,} updates, and of its validation "
             "loss there (the reference's cross-entropy, lower is better).", "",
             *table_header(["run", "read beyond Multi30k's pairs", "seed", *(f"{step:,}" for step in SHOWN),
                            f"mean BLEU {window}", f"mean loss {window}"], "lll" + "r" * (len(SHOWN) + 2))]
    lines += [_row(model, validations(results / model.name)) for model in runs]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "multi30k", help="archive folder")
    parser.add_argument("--details", type=Path, default=ROOT / "docs" / "training.md",
                        help="file holding the block")
    parser.add_argument("--check", action="store_true", help="exit 1 if the block is not current")
    return parser.parse_args(argv)


@command
def main(argv: list[str] | None = None) -> int:
    args = parse_args(arguments(argv))
    return write_or_check(args.details, START, END, table(args.results), args.check, "validation table",
                          f"python -m {MODULE}")


if __name__ == "__main__":
    sys.exit(main())
