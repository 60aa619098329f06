"""Regenerate the attention-comparison tables of docs/comparing.md and README.md from a committed comparison report.

Usage: python -m tools.compare_table [--report reports/multi30k] [--readme docs/comparing.md]
       [--summary README.md] [--check]

The report folder is what `make compare SUITE=multi30k BUDGET=...` wrote: compare.json (scores, paired
bootstrap against each family's baseline, speeds, attention diagnostics) and suite.json (budget, machine).
The block between <!-- compare:start --> and <!-- compare:end --> of --readme gets the full table, the block
between <!-- compare-summary:start --> and <!-- compare-summary:end --> of --summary the front page's short one
(BLEU on every test set); --check only reports whether they are current. A figure the report has none of (a run
too short to log its speed) shows as "–".
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, arguments, blamed, cell, markdown_row, prog, read_json, table_header, write_or_check
from benchmarks.compare_suite import budget_overrides
from nmt.cli import command
from nmt.compare import p_text

MODULE = "tools.compare_table"
MISSING = "–"  # a figure the report has none of
README = ROOT / "docs" / "comparing.md"
FRONT_PAGE = ROOT / "README.md"
START, END = "<!-- compare:start -->", "<!-- compare:end -->"
SUMMARY_START, SUMMARY_END = "<!-- compare-summary:start -->", "<!-- compare-summary:end -->"
OFFICIAL = ("test2017", "mscoco2017", "test2018")  # Multi30k's further test sets, in the order of their release
HEADER = table_header(["variant", "BLEU", "chrF", "BLEU 95% CI", "p (BLEU)", "p (chrF)", "updates", "train tgt tok/s",
                       "decode sent/s", "entropy / uniform", "rows > 90% on one token", "near-uniform rows"],
                      "l" + "r" * 11)


def _row(row: dict[str, Any], sig: dict[str, Any], diag: dict[str, Any], resamples: int) -> str:
    bleu, chrf = sig["bleu"], sig["chrf"]
    cells = [f"{row['attention']}", cell(row["bleu"], ".2f", MISSING), cell(row["chrf"], ".2f", MISSING),
             f"{bleu['ci95'][0]:.2f}–{bleu['ci95'][1]:.2f}", p_text(bleu["p_value"], resamples),
             p_text(chrf["p_value"], resamples), cell(row.get("train_steps"), ",", MISSING),
             cell(row.get("train_tgt_tok_s"), ",.0f", MISSING), cell(row.get("decode_sentences_per_s"), ".1f", MISSING)]
    if "error" in diag:
        cells += ["–", "–", "–"]
    else:
        cells += [f"{diag['mean_entropy']:.2f} / {diag['mean_uniform_entropy']:.2f}", f"{diag['focused_share']:.1%}",
                  f"{diag['uniform_share']:.1%}"]
    return markdown_row(cells)


def _setup(suite: dict[str, Any]) -> tuple[str, str]:
    """The make argument giving the suite's budget, and how every variant was trained, in words."""
    budget, m = suite["budget"], suite["machine"]
    if budget is not None and not isinstance(budget, str):
        raise ValueError(f"budget is {budget!r}, not a string such as 20m, 1.5h or 3000")
    limits = budget_overrides(budget)[1::2]  # a ValueError for a budget compare_suite would not take
    settings = [item for item in suite.get("overrides", []) if item not in limits]  # those of `--set`
    threads = next((item.split("=", 1)[1] for item in settings if item.startswith("train.threads=")),
                   m["torch_threads"])
    machine = f"on {m['cpu']} ({m['cpu_count']} cores, {threads} threads, torch {m['torch']})"
    make = (f" BUDGET={budget}" if limits else "") + (
        f' SET="{" ".join(f"--set {item}" for item in settings)}"' if settings else "")
    if not limits:
        return make, f"until its config's own stopping rule {machine}"
    if budget.strip()[-1] in "mh":
        return make, f"for the same wall-clock budget ({budget}) {machine}"
    return make, f"for the same number of updates ({budget}) {machine}"


def _lines(data: dict[str, Any], budget: str, trained: str, shown: Path) -> list[str]:
    """The line on how the figures were made, the header, then one row per variant."""
    intro = (f"`make compare SUITE={data['suite']}{budget}`: each variant trained from scratch {trained}, then "
             f"scored on the {data['test_sentences']:,} test sentences.")
    if any(row["status"] == "ok" for row in data["runs"]):  # only then are there significance and diagnostics
        baselines = ", ".join(f"`{name}`" for name in data["baselines"].values())
        resamples = data["significance"]["resamples"]
        intro += (f" p: paired bootstrap ({resamples:,} resamples) against the family's baseline ({baselines}), "
                  f"* below 0.05, ≤ {1 / resamples:g} the smallest p-value {resamples:,} resamples can give. "
                  f"Attention columns: cross-attention of the first {data['diagnostics_sentences']} test "
                  "translations (Transformer: last layer, mean over heads); "
                  "entropy in nats against that of uniform rows.")
    lines = [f"{intro} Full report: [{shown}/compare.md]({shown}/compare.md).", "", *HEADER]
    for row in data["runs"]:
        if row["status"] != "ok":
            lines.append(f"| {row.get('attention', row['name'])} | {row['status']}: {row['reason']} |" + " |" * 10)
            continue
        lines.append(_row(row, data["significance"]["runs"][row["name"]], data["diagnostics"][row["name"]],
                          data["significance"]["resamples"]))
    return lines + _further_lines(data)


def _splits(data: dict[str, Any]) -> tuple[str, list[str]]:
    """The name the report's own test set goes by (Multi30k's split `test` is test2016) and its further test sets,
    in the order of their release."""
    further = data.get("further_test_sets") or {}
    splits = sorted(further, key=lambda name: (OFFICIAL.index(name) if name in OFFICIAL else len(OFFICIAL), name))
    return ("test2016" if data["suite"] == "multi30k" else "test"), splits


def _bleu_by_split(data: dict[str, Any], row: dict[str, Any], splits: list[str]) -> list[tuple[dict[str, Any], int]]:
    """A usable run's BLEU on the report's test set, then on each of `splits`: the bootstrap's result (score and p
    against the baseline) with its number of resamples."""
    further = data.get("further_test_sets") or {}
    results = [(data["significance"]["runs"][row["name"]]["bleu"], data["significance"]["resamples"])]
    return results + [(further[split]["runs"][row["name"]]["bleu"], further[split]["resamples"]) for split in splits]


def _further_lines(data: dict[str, Any]) -> list[str]:
    """BLEU on every test set each usable run was decoded on, with the paired bootstrap's p against its baseline
    (none when some run lacks a further test set)."""
    first, splits = _splits(data)
    if not splits:
        return []
    lines = ["", "BLEU on each official test set, with p against the family's baseline as above:", "",
             *table_header(["variant", *(f"{name} {col}" for name in (first, *splits) for col in ("BLEU", "p"))],
                           "l" + "r" * (2 * len(splits) + 2))]
    for row in data["runs"]:
        if row["status"] != "ok":
            continue
        lines.append(markdown_row([row["attention"], *(text for m, resamples in _bleu_by_split(data, row, splits)
                                                       for text in (f"{m['score']:.2f}",
                                                                    p_text(m["p_value"], resamples)))]))
    return lines


def summary(report: Path, readme: Path = FRONT_PAGE, details: Path = README) -> str:
    """The front page's table: BLEU of every usable variant on each test set, * where the paired bootstrap
    tells it from its family's baseline (p < 0.05); links to `details` and the report relative to `readme`."""
    compare_file = report / "compare.json"
    data = read_json(compare_file)
    with blamed(compare_file):
        first, splits = _splits(data)
        usable = [row for row in data["runs"] if row["status"] == "ok"]
        baselines = set(data["baselines"].values())
        shown = Path(os.path.relpath(details.resolve(), readme.resolve().parent)).as_posix()
        if not usable:
            return f"No variant of the comparison finished: see [{shown}]({shown}#attention-variants-on-multi30k).\n"
        lines = [f"Attention variants of one family trained for the same number of updates, BLEU on each test set; "
                 f"* the paired bootstrap tells it from the family's baseline (p < 0.05). How they were trained, "
                 f"chrF, speed and attention statistics: [{shown}]({shown}#attention-variants-on-multi30k).", "",
                 *table_header(["variant", "updates", *(f"BLEU {name}" for name in (first, *splits))],
                               "lr" + "r" * (len(splits) + 1))]
        for row in usable:
            name = row["attention"] + (" (baseline)" if row["name"] in baselines else "")
            scores = [f"{m['score']:.2f}" + ("*" if m["p_value"] is not None and m["p_value"] < 0.05 else "")
                      for m, _ in _bleu_by_split(data, row, splits)]
            lines.append(markdown_row([name, cell(row.get("train_steps"), ",", MISSING), *scores]))
    return "\n".join(lines) + "\n"


def table(report: Path, readme: Path = README) -> str:
    """The generated Markdown: one line on how the figures were made, then one row per variant. The link to the
    full report is relative to `readme`'s folder."""
    compare_file, suite_file = report / "compare.json", report / "suite.json"
    data, suite = read_json(compare_file), read_json(suite_file)
    with blamed(suite_file):
        budget, trained = _setup(suite)
    shown = Path(os.path.relpath(report.resolve(), readme.resolve().parent)).as_posix()
    with blamed(compare_file):
        return "\n".join(_lines(data, budget, trained, shown)) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "multi30k", help="comparison folder")
    parser.add_argument("--readme", type=Path, default=README, help="Markdown file that gets the full table")
    parser.add_argument("--summary", type=Path, default=FRONT_PAGE, help="Markdown file that gets the short table")
    parser.add_argument("--check", action="store_true", help="exit 1 if the block is not current")
    return parser.parse_args(argv)


@command
def main(argv: list[str] | None = None) -> int:
    args = parse_args(arguments(argv))
    report, fix = args.report.resolve(), f"python -m {MODULE}"
    status = write_or_check(args.readme, START, END, table(report, args.readme), args.check, "comparison table", fix)
    return status | write_or_check(args.summary, SUMMARY_START, SUMMARY_END,
                                   summary(report, args.summary, args.readme), args.check, "comparison summary", fix)


if __name__ == "__main__":
    sys.exit(main())
