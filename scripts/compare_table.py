"""Regenerate the attention-comparison table in README.md from a committed comparison report.

Usage: python scripts/compare_table.py [--report reports/multi30k] [--readme README.md] [--check]

The report folder is what `make compare SUITE=multi30k BUDGET=...` wrote: compare.json (scores, paired
bootstrap against each family's baseline, speeds, attention diagnostics) and suite.json (budget, machine).
The README block between <!-- compare:start --> and <!-- compare:end --> is rewritten; --check only reports
whether it is current.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from markdown_block import write_or_check

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- compare:start -->", "<!-- compare:end -->"
HEADER = ["| variant | BLEU | chrF | BLEU 95% CI | p (BLEU) | p (chrF) | updates | train tgt tok/s | decode sent/s "
          "| entropy / uniform | rows > 90% on one token | near-uniform rows |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


def _p(result: dict[str, Any]) -> str:
    if result["p_value"] is None:
        return "baseline"
    return f"{result['p_value']:.3f}{'*' if result['p_value'] < 0.05 else ''}"


def _row(row: dict[str, Any], sig: dict[str, Any], diag: dict[str, Any]) -> str:
    bleu, chrf = sig["bleu"], sig["chrf"]
    cells = [f"{row['attention']}", f"{row['bleu']:.2f}", f"{row['chrf']:.2f}",
             f"{bleu['ci95'][0]:.2f}–{bleu['ci95'][1]:.2f}", _p(bleu), _p(chrf),
             f"{row['train_steps']:,}", f"{row['train_tgt_tok_s']:,.0f}", f"{row['decode_sentences_per_s']:.1f}"]
    if "error" in diag:
        cells += ["–", "–", "–"]
    else:
        cells += [f"{diag['mean_entropy']:.2f} / {diag['mean_uniform_entropy']:.2f}", f"{diag['focused_share']:.1%}",
                  f"{diag['uniform_share']:.1%}"]
    return "| " + " | ".join(cells) + " |"


def table(report: Path) -> str:
    """The generated Markdown: one line on how the figures were made, then one row per variant."""
    data = json.loads((report / "compare.json").read_text(encoding="utf-8"))
    suite = json.loads((report / "suite.json").read_text(encoding="utf-8"))
    machine = suite["machine"]
    baselines = ", ".join(f"`{name}`" for name in data["baselines"].values())
    shown = report.relative_to(ROOT) if report.is_relative_to(ROOT) else report
    lines = [f"`make compare SUITE={data['suite']} BUDGET={suite['budget']}`: each variant trained from scratch "
             f"for the same wall-clock budget ({suite['budget']}) on {machine['cpu']} ({machine['cpu_count']} "
             f"cores, {machine['torch_threads']} threads, torch {machine['torch']}), then scored on the "
             f"{data['test_sentences']:,} test sentences. p: paired bootstrap ({data['significance']['resamples']:,} "
             f"resamples) against the family's baseline ({baselines}), * below 0.05. Attention columns: "
             f"cross-attention of the first {data['diagnostics_sentences']} test translations (Transformer: last "
             "layer, mean over heads); entropy in nats against that of uniform rows. Full report: "
             f"[{shown}/compare.md]({shown}/compare.md).", "", *HEADER]
    for row in data["runs"]:
        if row["status"] != "ok":
            lines.append(f"| {row.get('attention', row['name'])} | {row['status']}: {row['reason']} |" + " |" * 10)
            continue
        lines.append(_row(row, data["significance"]["runs"][row["name"]], data["diagnostics"][row["name"]]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compare_table.py", description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=ROOT / "reports" / "multi30k", help="comparison folder")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="README whose block is rewritten")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README block is not current")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        body = table(args.report.resolve())
    except (OSError, ValueError, KeyError) as err:
        print(f"compare_table.py: {args.report}: {err!r}", file=sys.stderr)
        return 1
    return write_or_check(args.readme, START, END, body, args.check, "comparison table", "compare_table.py")


if __name__ == "__main__":
    sys.exit(main())
