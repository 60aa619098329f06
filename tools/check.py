"""`make check`: every committed figure is what its evidence gives.

Usage: python -m tools.check [--root .] [--only blocks commands scores bootstrap] [--bootstrap-run NAME]

Only the files git tracks are read (as they are in the working tree, edits included): runs, reports and benchmark
results of a user's own, beside the committed ones, are never checked. A root that is no git checkout (a copy of
the committed files) is read whole.

- blocks: every generated block is regenerated in memory and compared with the committed file: the results
  tables and the speed summary (README.md), the other directions' results tables, every archived model and the
  recipe table (docs/training.md, its models' bootstrap.json current against their translations), the comparison
  table (docs/comparing.md), the speed tables (docs/benchmarks.md), the large-corpus table (docs/data.md), the
  sizing table (docs/training.md), the configuration reference (docs/config.md) and reports/multi30k/compare.md
  (from its compare.json).
- commands: every command a committed result records (benchmarks/results, results/, reports/) still runs:
  its module, script, make target or nmt command exists and its parser takes the recorded arguments
  (`tools.commands`).
- scores: every committed translation file (results/**/<split>.hyp.<lang>, reports/*/runs/*/<split>.hyp.<lang>)
  is re-scored with sacreBLEU against the references of its Multi30k test set (test2016, test2017, mscoco2017,
  test2018) in its language (English for a German→English model, German for an English→German one); its BLEU,
  BLEU-lc, chrF and TER must equal its eval_<split>.json, and a comparison run's BLEU, chrF and TER its
  compare.json row.
- bootstrap: one comparison's paired bootstrap is recomputed from the seed its signature records; scores,
  means, confidence intervals and p-values must equal compare.json. So is the first recipe model's (by name),
  whose figures must equal its bootstrap.json.

The references come from NMT_DATA_MIRROR, else ../shared/data/multi30k beside the repository, else the
download cache (data/downloads), fetched with its checksums like nmt-prepare does. Each difference is one
line on stderr; the exit status is 1 when there is any.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from benchmarks import large_corpus, run_all, sizing
from benchmarks.common import ROOT, arguments, prog, read_json
from nmt.cli import command, config_reference
from nmt.compare import markdown, paired_bootstrap
from nmt.evaluation import Scorer
from tools import compare_table, results_table, synthetic, val_table
from tools.commands import problem as command_problem
from tools.commands import recorded as recorded_commands
from tools.results_table import References, references, sacrebleu_seed

MODULE = "tools.check"
KINDS = ("blocks", "commands", "scores", "bootstrap")
BOOTSTRAP_RUN = "cmp_multi30k_transformer_local"  # the comparison whose bootstrap is recomputed
Problems = list[str]


def _block(path: Path, start: str, end: str, body: str, fix: str) -> Problems:
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if f"{start}\n{body}{end}" in text:
        return []
    return [f"{path}: the block {start} differs from what its evidence gives; run `{fix}`"]


def _file(path: Path, body: str, fix: str) -> Problems:
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    return [] if current == body else [f"{path}: differs from what its evidence gives; run `{fix}`"]


def blocks(root: Path) -> Problems:
    """Every generated block and file against what the committed JSON files give."""
    readme, docs = root / "README.md", root / "docs"
    bench_results = root / "benchmarks" / "results"
    report = root / "reports" / "multi30k"
    problems = _block(readme, results_table.START, results_table.END,
                      results_table.tables(root / "results" / "multi30k"), f"python -m {results_table.MODULE}")
    for start, end, block in ((results_table.DIRECTIONS_START, results_table.DIRECTIONS_END, results_table.directions),
                              (results_table.DETAILS_START, results_table.DETAILS_END, results_table.details)):
        problems += _block(docs / "training.md", start, end, block(root / "results" / "multi30k"),
                           f"python -m {results_table.MODULE}")
    records, stale = results_table.bootstraps(root / "results" / "multi30k")  # the recipe table's, where current
    problems += stale or _block(docs / "training.md", results_table.RECIPE_START, results_table.RECIPE_END,
                                results_table.recipe_table(root / "results" / "multi30k", records),
                                f"python -m {results_table.MODULE}")
    comparing = docs / "comparing.md"
    problems += _block(comparing, compare_table.START, compare_table.END, compare_table.table(report, comparing),
                       f"python -m {compare_table.MODULE}")
    problems += _block(readme, compare_table.SUMMARY_START, compare_table.SUMMARY_END,
                       compare_table.summary(report, readme, comparing), f"python -m {compare_table.MODULE}")
    problems += _file(report / "compare.md", markdown(read_json(report / "compare.json")),
                      "nmt-compare (compare.md is written from compare.json)")
    for target in (docs / "benchmarks.md", readme):
        for start, end, kinds in run_all.generated_blocks(target):
            problems += _block(target, start, end, run_all.tables(bench_results, kinds),
                               f"python -m {run_all.MODULE} --report-only")
    problems += _block(docs / "data.md", large_corpus.START, large_corpus.END, large_corpus.report(bench_results),
                       f"python -m {large_corpus.MODULE} --report-only")
    problems += _block(docs / "training.md", sizing.START, sizing.END, sizing.report(bench_results),
                       f"python -m {sizing.MODULE} --report-only")
    problems += _block(docs / "training.md", synthetic.START, synthetic.END,
                       synthetic.report(root / "results" / "synthetic", bench_results, root / "results" / "multi30k"),
                       f"python -m {synthetic.MODULE} report")
    problems += _block(docs / "training.md", val_table.START, val_table.END,
                       val_table.table(root / "results" / "multi30k"), f"python -m {val_table.MODULE}")
    if config_reference().strip() != (docs / "config.md").read_text(encoding="utf-8").strip():
        problems.append(f"{docs / 'config.md'}: differs from what nmt-config-doc writes; run `make docs`")
    return problems


def commands(root: Path) -> Problems:
    """Every command a committed result records runs today: its module, script, target or nmt command exists,
    and the benchmark's parser takes its arguments."""
    files = sorted({*root.glob("benchmarks/results/*.json"), *root.glob("results/**/*.json"),
                    *root.glob("reports/**/*.json")})
    return [f"{path}: {key} `{recorded}`: {why}" for path in files
            for key, recorded in recorded_commands(read_json(path))
            if (why := command_problem(recorded, root)) is not None]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]  # one line per sentence, each ending in \n


_SCORERS: dict[str, Scorer] = {}
_SCORED: dict[tuple[str, str], dict] = {}


def _score_once(hyps: list[str], refs: list[str]) -> dict:
    """nmt-evaluate's scores, once per distinct pair of hypotheses and references in this process (a run
    committed in two places is scored once, and so is a file checked again), the references tokenized once."""
    key = tuple(hashlib.sha256("\n".join(lines).encode()).hexdigest() for lines in (hyps, refs))
    if key not in _SCORED:
        if key[1] not in _SCORERS:
            _SCORERS[key[1]] = Scorer(refs)
        _SCORED[key] = _SCORERS[key[1]](hyps)
    return _SCORED[key]


def _rescore(hyp_file: Path, refs: list[str], rows: dict[str, dict]) -> Problems:
    """One translation file (<split>.hyp.<lang>) re-scored, against its report (eval_<split>.json) and, for a
    comparison run, its compare.json row."""
    report_file = hyp_file.parent / f"eval_{_split(hyp_file)}.json"
    report = read_json(report_file)
    hyps = _lines(hyp_file)
    if len(hyps) != len(refs) or report.get("sentences") != len(refs):
        return [f"{hyp_file}: {len(hyps)} lines and {report.get('sentences')} in its report for {len(refs)} "
                f"{_split(hyp_file)} references"]
    lowercase = bool(report.get("lowercase", False))
    fresh = _score_once(hyps, [r.lower() for r in refs] if lowercase else refs)
    recorded = {key: report["scores"].get(key) for key in ("bleu", "bleu_lc", "chrf", "ter")}
    problems = [f"{report_file}: scores.{key} is {value}, but {hyp_file.name} scores {fresh[key]}"
                for key, value in recorded.items() if value is not None and value != fresh[key]]
    row = rows.get(str(hyp_file.parent)) if _split(hyp_file) == "test" else None
    if row is not None:
        problems += [f"{row['file']}: {hyp_file.parent.name} {key} is {row[key]}, but {hyp_file.name} scores "
                     f"{fresh[key]}" for key in ("bleu", "chrf", "ter") if row.get(key) != fresh[key]]
    return problems


def _comparison_rows(root: Path) -> dict[str, dict]:
    """Each comparison run's compare.json row, by the folder its files were copied to."""
    rows = {}
    for compare_file in sorted(root.glob("reports/*/compare.json")):
        for row in read_json(compare_file).get("runs", []):
            if row.get("status") == "ok":
                rows[str(compare_file.parent / "runs" / row["name"])] = {**row, "file": compare_file}
    return rows


def _split(hyp_file: Path) -> str:
    return hyp_file.name.split(".hyp.")[0]


def _language(hyp_file: Path) -> str:
    return hyp_file.name.split(".hyp.")[1]


def scores(root: Path, refs: References) -> Problems:
    """Every committed translation file re-scored against the references of its test set in its language."""
    files = sorted(root.glob("results/**/*.hyp.*")) + sorted(root.glob("reports/*/runs/*/*.hyp.*"))
    if not files:
        return [f"{root}: no committed translation files (results/**/<split>.hyp.<lang>)"]
    rows = _comparison_rows(root)
    listed = [f"{row['file']}: run {Path(name).name} has no committed test.hyp.<lang>" for name, row in rows.items()
              if not any(Path(name).glob("test.hyp.*"))]
    texts: dict[tuple[str, str], list[str]] = {}
    problems = []
    for path in files:
        key = (_split(path), _language(path))
        if key not in texts:
            texts[key] = refs(*key)
        problems += _rescore(path, texts[key], rows)
    return listed + problems


def bootstrap(root: Path, refs: list[str], name: str = BOOTSTRAP_RUN) -> Problems:
    """The paired bootstrap of run `name` against its baseline, recomputed from the recorded seed."""
    compare_file = root / "reports" / "multi30k" / "compare.json"
    sig = read_json(compare_file)["significance"]
    entry = sig["runs"][name]
    base = entry["baseline"]
    seed = re.search(r"\|seed:(\d+)\|", sig["signatures"]["bleu"])
    if seed is None:
        return [f"{compare_file}: the bleu signature records no seed"]
    runs = root / "reports" / "multi30k" / "runs"
    systems = [(base, _lines(runs / base / "test.hyp.en")), (name, _lines(runs / name / "test.hyp.en"))]
    with sacrebleu_seed(seed.group(1)):
        fresh, _ = paired_bootstrap(systems, refs, sig["resamples"])
    return [f"{compare_file}: significance.runs.{run}.{metric} is {sig['runs'][run][metric]}, recomputed "
            f"{fresh[run][metric]}" for run in (base, name) for metric in ("bleu", "chrf")
            if fresh[run][metric] != {k: sig["runs"][run][metric][k] for k in fresh[run][metric]}]


def recipe_bootstrap(root: Path, refs: References) -> Problems:
    """The first current bootstrap.json of the recipe table (by model name) recomputed from the translations it
    compares: every figure must equal the file's."""
    results = root / "results" / "multi30k"
    records, _ = results_table.bootstraps(results)  # a stale one is the blocks check's to report
    if not records:
        return []
    name = min(records)
    if results_table.recomputed(results, name, refs) == records[name]:
        return []
    return [f"{results / name / results_table.BOOTSTRAP}: differs from the paired bootstrap recomputed from the "
            f"translations; run `python -m {results_table.MODULE}` after removing it"]


def _tracked(root: Path) -> list[str] | None:
    """The files git tracks in `root`, relative to it; None when `root` is not the top of a git checkout."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True).stdout.strip()
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, text=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [name for name in listed.split("\0") if name] if Path(top).resolve() == root.resolve() else None


@contextlib.contextmanager
def committed(root: Path) -> Iterator[Path]:
    """A copy of the files git tracks in `root` (a few MB), for the checks to walk; `root` itself when it is no
    git checkout."""
    names = _tracked(root)
    if names is None:
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="nmt-check-") as folder:
        for name in names:
            if (root / name).is_file():  # a tracked file deleted in the working tree is not there to check
                copy = Path(folder) / name
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / name, copy)
        yield Path(folder)


def run_checks(root: Path, only: tuple[str, ...] = KINDS, bootstrap_run: str = BOOTSTRAP_RUN,
               refs: References | None = None) -> Problems:
    """Every problem the chosen checks find in the committed files of `root` (an empty list when everything
    holds); each names the file under `root`. `refs` gives a test set's references in a language (default:
    `references`)."""
    with committed(root) as tree:
        problems = blocks(tree) if "blocks" in only else []
        problems += commands(tree) if "commands" in only else []
        if "scores" in only or "bootstrap" in only:
            texts = refs or (lambda split, language: references(root, split, language))
            if "scores" in only:
                problems += scores(tree, texts)
            if "bootstrap" in only:
                problems += bootstrap(tree, texts("test", "en"), bootstrap_run) + recipe_bootstrap(tree, texts)
        return [problem.replace(str(tree), str(root)) for problem in problems]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this one)")
    parser.add_argument("--only", nargs="+", choices=KINDS, default=list(KINDS), help="the checks to run")
    parser.add_argument("--bootstrap-run", default=BOOTSTRAP_RUN, help="comparison run whose bootstrap is redone")
    return parser.parse_args(argv)


@command
def main(argv: list[str] | None = None) -> int:
    args = parse_args(arguments(argv))
    problems = run_checks(args.root.resolve(), tuple(args.only), args.bootstrap_run)
    for problem in problems:
        print(f"check: {problem}", file=sys.stderr)
    if not problems:
        print(f"check: {', '.join(args.only)}: every figure matches its evidence")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
