"""Regenerate the Multi30k results tables in README.md from the committed reports in results/multi30k/.

Usage: python scripts/results_table.py [--results results/multi30k] [--readme README.md] [--check]

Each results/multi30k/<config>/ folder holds the test report (eval_test.json), the run's log (metrics.jsonl,
which gives the epochs, updates and training time), the translations (test.hyp.en) and run.json: the exact
command and the hardware it was trained on. The config of the same name in configs/ says whether the row
belongs to the full-length table or to the fixed-budget one (train.max_minutes set). Each row also gives the
`nmt-evaluate` command that reproduces its scores from the run folder: every decoding setting the report
records as used is spelled out as a flag, whatever the checkpoint holds. The README block
between <!-- results:start --> and <!-- results:end --> is rewritten; --check only reports whether it is
current.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from markdown_block import write_or_check

from nmt.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- results:start -->", "<!-- results:end -->"
HEADER = ["| config | params | epochs / steps | training time | hardware | beam / lp "
          "| BLEU | BLEU-lc | chrF | TER | training command | scores reproduced by |",
          "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---|"]
SOURCE_LIMIT = 250  # the source truncation of reports that do not record it


def evaluate_command(name: str, report: dict) -> str:
    """The nmt-evaluate command that decodes the report's split with exactly the report's settings."""
    d = report["decode"]
    flags = ["--split", report["split"], "--beam", str(d["beam"]), "--length-penalty", str(d["length_penalty"]),
             "--max-len-a", str(d["max_len_a"]), "--max-len-b", str(d["max_len_b"])]
    if d.get("max_source_tokens", SOURCE_LIMIT) != SOURCE_LIMIT:
        flags += ["--max-source-tokens", str(d["max_source_tokens"])]
    if report.get("precision", "fp32") != "fp32":
        flags += ["--precision", report["precision"]]
    return " ".join(["nmt-evaluate", f"runs/{name}", *flags])


def _progress(metrics: Path) -> tuple[str, int, float]:
    """(epochs, updates, minutes) of the whole run, from its log; the validation closing epoch 1 gives the
    updates per epoch."""
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not records:
        raise ValueError(f"{metrics} is empty")
    last = records[-1]
    per_epoch = next((r["step"] for r in records if r.get("type") == "valid" and r.get("epoch") == 1), 0)
    epochs = f"{last['step'] / per_epoch:.1f}" if per_epoch else "–"
    return epochs, last["step"], last["elapsed"] / 60


def _row(folder: Path) -> tuple[bool, float, str]:
    """(is it a fixed-budget run, its BLEU, its Markdown row) for one results folder."""
    report = json.loads((folder / "eval_test.json").read_text(encoding="utf-8"))
    run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    config = ROOT / "configs" / f"{folder.name}.yaml"
    budget = load_config(config).train.max_minutes > 0
    s, d = report["scores"], report["decode"]
    params = report["parameters"] if "parameters" in report else report["train"]["parameters"]  # older reports
    epochs, steps, minutes = _progress(folder / "metrics.jsonl")
    cells = [f"`{folder.name}`", f"{params / 1e6:.2f} M", f"{epochs} / {steps:,}", f"{minutes:.0f} min",
             run["hardware"], f"{d['beam']} / {d['length_penalty']}",
             f"{s['bleu']:.2f}", f"{s['bleu_lc']:.2f}", f"{s['chrf']:.2f}", f"{s['ter']:.2f}", f"`{run['command']}`",
             f"`{evaluate_command(folder.name, report)}`"]
    return budget, s["bleu"], "| " + " | ".join(cells) + " |"


def _ranked(rows: list[tuple[float, str]]) -> list[str]:
    return [row for _, row in sorted(rows, key=lambda r: -r[0])]


def tables(results: Path) -> str:
    """The generated Markdown: full-length runs first, then the fixed-budget runs, each by BLEU."""
    full: list[tuple[float, str]] = []
    budget: list[tuple[float, str]] = []
    for folder in sorted(p for p in results.iterdir() if (p / "eval_test.json").exists()):
        try:
            is_budget, bleu, row = _row(folder)
        except KeyError as err:
            raise ValueError(f"{folder}: a report has no field {err}") from None
        (budget if is_budget else full).append((bleu, row))
    parts = []
    if full:
        parts += ["**Full-length runs** (the final model averages the best epoch checkpoints):", "",
                  *HEADER, *_ranked(full), ""]
    if budget:
        parts += ["**Fixed budget: 20 minutes of training on 2 CPU cores** (wall clock of the trainer, validations "
                  "included):", "", *HEADER, *_ranked(budget), ""]
    return "\n".join(parts) + "\n" if parts else "No results yet.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="results_table.py", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "multi30k", help="reports folder")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="README whose block is rewritten")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README block is not current")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        body = tables(args.results)
    except (OSError, ValueError, ConfigError) as err:
        print(f"results_table.py: {err}", file=sys.stderr)
        return 1
    return write_or_check(args.readme, START, END, body, args.check, "results tables", "results_table.py")


if __name__ == "__main__":
    sys.exit(main())
