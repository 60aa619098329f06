"""Rebuild the Multi30k results tables from the models archived in results/multi30k/.

Usage: python -m tools.results_table [--results results/multi30k] [--readme README.md]
                                         [--details docs/training.md] [--check]

Each results/multi30k/<name>/ folder is one model as `python -m tools.archive` wrote it: a report and the
translations for each of the four official test sets (eval_<split>.json, <split>.hyp.<target language>), its
config.yaml (the recipe and the direction, data.direction), and run.json (the
training command, the commit of the code that trained it, the checkpoint's sha256, updates, time, hardware and what
ran beside it; an ensemble's members). Runs of one recipe differing only in their seed (`<group>_seed<N>`) share a
row: the mean ± sample standard deviation over the seeds, on each test set. A folder whose run.json names no commit
of the code that trained the model is refused: no figure here comes from code no one can check out.

README.md gets the German→English models, one table per family (Transformer, GRU), and the published anchors
between <!-- results:start --> and <!-- results:end -->. The details file (docs/training.md) gets one table per
other direction (English→German: scored against the German references, comparable with no German→English row)
between <!-- directions:start --> and <!-- directions:end -->, and every model with its commit, checkpoint and
hardware between <!-- models:start --> and <!-- models:end -->. --check writes nothing and exits 1 if any block
is not current.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
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
from nmt.config import Config, load_config
from nmt.errors import FileError
from nmt.fileio import describe_os_error
from nmt.run.folder import RunDir
from tools.archive import SPLITS, group_of

MODULE = "tools.results_table"
START, END = "<!-- results:start -->", "<!-- results:end -->"
DETAILS_START, DETAILS_END = "<!-- models:start -->", "<!-- models:end -->"
DIRECTIONS_START, DIRECTIONS_END = "<!-- directions:start -->", "<!-- directions:end -->"
README_DIRECTION = "de-en"  # the README's tables and anchors; the other directions' tables go in the details file
LANGUAGES = {"de": "German", "en": "English"}
TITLES = {"test": "test2016", "test2017": "test2017", "mscoco2017": "mscoco2017", "test2018": "test2018"}
ATTENTION = {"additive": "Bahdanau (additive) attention", "dot": "dot attention", "general": "general attention"}
FAMILIES = {"transformer": "Transformer", "rnn": "GRU"}
ANCHORS = [  # (who, BLEU by test set, what kind of BLEU): published figures, not measured here
    ("OPUS-MT's best general German→English models",
     {"test": 40.5, "test2017": 41.5, "mscoco2017": 33.9, "test2018": 37.2},
     "cased sacreBLEU, trained on far more than Multi30k: compare with BLEU"),
    ("Lample et al. 2018, a supervised baseline trained on Multi30k only", {"test": 38.38},
     "lowercased tokenized BLEU: compare with BLEU-lc"),
]


@dataclass
class Model:
    """One archived model (a run or an ensemble) and its scores on the test sets it was decoded on."""

    name: str
    group: str
    kind: str  # "run" or "ensemble"
    cfg: Config
    run: dict[str, Any]
    scores: dict[str, dict[str, float]]  # test set -> bleu, bleu_lc, chrf, ter
    decode: dict[str, Any]
    updates: int
    sha256: str

    @property
    def commit(self) -> str:
        return self.run["commit"][:7]

    @property
    def direction(self) -> str:
        return self.cfg.data.direction


def direction_title(direction: str) -> str:
    """A direction in words, as a table's title: de-en is "German→English"."""
    return "→".join(LANGUAGES.get(code, code) for code in direction.split("-"))


def _scores(folder: Path) -> dict[str, dict[str, float]]:
    scores = {}
    for split in SPLITS:
        path = RunDir(folder).report(split)
        if path.is_file():
            with blamed(path):
                s = read_json(path)["scores"]
                scores[split] = {key: finite(s[key], f"scores.{key}") for key in ("bleu", "bleu_lc", "chrf", "ter")}
    return scores


def read_model(folder: Path) -> Model:
    """The archived model in `folder`; a FileError naming the file at fault."""
    run_file, report_file = folder / "run.json", RunDir(folder).report("test")
    run, report = read_json(run_file), read_json(report_file)
    if not isinstance(run.get("commit"), str) or not run["commit"]:
        raise FileError(f"{run_file}: names no commit of the code that trained the model; archive it with "
                        "python -m tools.archive, which records it")
    with blamed(run_file):
        kind = run["kind"]
    cfg = load_config(folder / RunDir.CONFIG)
    with blamed(report_file):
        first = report["members"][0]
        updates, sha256 = int(first["steps"]), first["sha256"]
        decode = {key: report["decode"][key] for key in ("beam", "length_penalty")}
    group = run.get("group", group_of(folder.name))
    return Model(folder.name, group, kind, cfg, run, _scores(folder), decode, updates, sha256)


def read_models(results: Path) -> list[Model]:
    try:
        folders = sorted(p for p in results.iterdir() if RunDir(p).report("test").is_file())
    except OSError as err:
        raise FileError(f"--results {describe_os_error(err)}") from None
    if not folders:
        raise FileError(f"--results {results}: no <name>/eval_test.json report in the folder")
    return [read_model(folder) for folder in folders]


def recipe(cfg: Config) -> tuple[int, str]:
    """(sort key, words) for a model's architecture and training budget."""
    m, t = cfg.model, cfg.train
    if m.arch == "transformer":
        name = "Transformer" + ("" if m.self_attention == "full" else f", {m.self_attention} self-attention")
    else:
        name = "GRU, no attention" if m.attention == "none" else f"GRU + {ATTENTION.get(m.attention, m.attention)}"
    if t.max_minutes:
        return 2, f"{name}, {t.max_minutes:g} minutes on 2 CPU cores"
    if t.max_steps:
        return 1, f"{name}, {t.max_steps:,} updates"
    return 0, f"{name}, full length ({t.max_epochs} epochs)"


def _mean(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _cells(models: list[Model]) -> list[str]:
    """BLEU on each test set, then BLEU-lc and chrF on test2016: a model's scores, or the seeds' mean ± std."""
    cells = []
    for split, key in [*((split, "bleu") for split in SPLITS), ("test", "bleu_lc"), ("test", "chrf")]:
        values = [m.scores[split][key] for m in models if split in m.scores]
        cells.append(_mean(values) if len(values) == len(models) else "–")
    return cells


def _updates(counts: list[int]) -> str:
    """The range of update counts of some models ("1,000", or "1,995–2,660")."""
    low, high = min(counts), max(counts)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def _group_rows(models: list[Model]) -> list[tuple[tuple[int, float], list[str]]]:
    """(sort key, rows) per group: its runs (one row, the mean over seeds), then its ensembles."""
    groups: dict[str, list[Model]] = {}
    for model in models:
        groups.setdefault(model.group, []).append(model)
    ranked = []
    for group, members in groups.items():
        runs = [m for m in members if m.kind != "ensemble"]
        first = (runs or members)[0]
        order, words = recipe(first.cfg)
        rows = []
        if runs:
            seeds = sorted({m.run.get("seed", m.cfg.train.seed) for m in runs})
            who = (f"{len(runs)} seeds ({', '.join(map(str, seeds))})" if len(runs) > 1
                   else f"seed {seeds[0]}")
            rows.append(markdown_row([f"{words}: `{group}`", who, _updates([m.updates for m in runs]), *_cells(runs),
                                      ", ".join(sorted({m.commit for m in runs}))]))
        for ensemble in (m for m in members if m.kind == "ensemble"):
            rows.append(markdown_row([f"{words}: ensemble `{ensemble.name}`",
                                      f"{len(ensemble.run['members'])} models",
                                      _updates([member["updates"] for member in ensemble.run["members"]]),
                                      *_cells([ensemble]), ensemble.commit]))
        mean_bleu = statistics.mean(m.scores["test"]["bleu"] for m in (runs or members))
        ranked.append(((order, -mean_bleu), rows))
    return ranked


COLUMNS = ["model", "runs", "updates", *(f"BLEU {TITLES[s]}" for s in SPLITS), "BLEU-lc test2016",
           "chrF test2016", "code"]


def _rows(models: list[Model]) -> list[str]:
    """The table rows of some models: family by family, the best group (by mean test2016 BLEU) first in each."""
    return [row for arch in FAMILIES for _, rows in sorted(_group_rows([m for m in models if m.cfg.model.arch == arch]),
                                                           key=lambda item: item[0]) for row in rows]


def _table(title: str, models: list[Model]) -> list[str]:
    """A titled table of some models' rows, and the blank line after it."""
    return [f"**{title}**", "", *table_header(COLUMNS, "lrr" + "r" * 6 + "l"), *_rows(models), ""]


def tables(results: Path) -> str:
    """The README block: the German→English models, one table per family, then the published anchors."""
    models = read_models(results)
    others = " Models of other directions: [docs/training.md](docs/training.md#other-directions)." if any(
        m.direction != README_DIRECTION for m in models) else ""
    parts = ["Each row is a model archived in `results/multi30k/<name>/` (beam 5, the length penalty chosen on the "
             "validation split); the seeds of one recipe share a row, as mean ± sample standard deviation. Every "
             "model's commit, checkpoint, hardware and training command: "
             f"[docs/training.md](docs/training.md#every-archived-model).{others}", ""]
    for arch, family in FAMILIES.items():
        members = [m for m in models if m.cfg.model.arch == arch and m.direction == README_DIRECTION]
        if members:
            parts += _table(family, members)
    anchors = "; ".join(f"{who}, {' / '.join(f'{scores[s]:g}' if s in scores else '–' for s in SPLITS)} ({kind})"
                        for who, scores, kind in ANCHORS)
    parts.append(f"Published anchors on test2016 / test2017 / mscoco2017 / test2018, not measured here: {anchors}.")
    return "\n".join(parts) + "\n"


def directions(results: Path) -> str:
    """The details file's block of other directions: one table per direction (every family in it), its seeds
    sharing a row as in the README's tables."""
    models = [m for m in read_models(results) if m.direction != README_DIRECTION]
    if not models:
        return f"No model of a direction other than {direction_title(README_DIRECTION)} is archived.\n"
    parts = []
    for direction in sorted({m.direction for m in models}):
        parts += _table(direction_title(direction), [m for m in models if m.direction == direction])
    return "\n".join(parts[:-1]) + "\n"


def details(results: Path) -> str:
    """The details block: every archived model with its provenance and its scores on each test set."""
    lines = [*table_header(["model", "code", "checkpoint sha256", "updates", "training", "hardware", "ran beside it",
                            "beam / lp", *(f"BLEU {TITLES[s]}" for s in SPLITS), "training command"],
                           "lllrrll" + "r" * 5 + "l")]
    for m in read_models(results):
        with blamed(results / m.name / "run.json"):
            lines.append(_detail_row(m))
    return "\n".join(lines) + "\n"


def _detail_row(m: Model) -> str:
    """One model's row of the details table: provenance, decoding settings and BLEU on each test set."""
    run = m.run
    if m.kind == "ensemble":
        sha = ", ".join(f"`{member['sha256'][:12]}`" for member in run["members"])
        trained, hardware = "–", run["hardware"]
        command_text = "ensemble of " + ", ".join(f"`{member['run']}`" for member in run["members"])
    else:
        sha = f"`{m.sha256[:12]}`"
        trained = f"{run['training_minutes']:.0f} min"
        threads = run.get("threads")
        hardware = run["hardware"] + (f", {threads} thread{'s' * (threads != 1)}" if threads else "")
        command_text = f"`{run['training_command']}`"
    bleu = [f"{m.scores[s]['bleu']:.2f}" if s in m.scores else "–" for s in SPLITS]
    name = f"`{m.name}`" + ("" if m.direction == README_DIRECTION else f" ({direction_title(m.direction)})")
    return markdown_row([name, m.commit, sha, f"{m.updates:,}", trained, hardware, run.get("beside", "–"),
                         f"{m.decode['beam']} / {m.decode['length_penalty']}", *bleu, command_text])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "multi30k", help="archive folder")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="file holding the results block")
    parser.add_argument("--details", type=Path, default=ROOT / "docs" / "training.md",
                        help="file holding the other directions' and the every-model blocks")
    parser.add_argument("--check", action="store_true", help="exit 1 if any block is not current")
    return parser.parse_args(argv)


def _has_markers(path: Path, pairs: tuple[tuple[str, str], ...]) -> None:
    """A FileError naming `path` unless it holds every marker pair, checked before any file is written: a details
    file lacking some leaves both files as they were."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise FileError(f"--details {describe_os_error(err)}") from None
    missing = [f"{start} … {end}" for start, end in pairs if start not in text or end not in text]
    if missing:
        raise FileError(f"{path}: no {' and no '.join(missing)} markers around the place of the tables")


@command
def main(argv: list[str] | None = None) -> int:
    args = parse_args(arguments(argv))
    fix = f"python -m {MODULE}"
    # every block read, and the details file's markers found, before any file is written
    results, others, models = tables(args.results), directions(args.results), details(args.results)
    if not args.check:
        _has_markers(args.details, ((DIRECTIONS_START, DIRECTIONS_END), (DETAILS_START, DETAILS_END)))
    status = write_or_check(args.readme, START, END, results, args.check, "results tables", fix)
    status |= write_or_check(args.details, DIRECTIONS_START, DIRECTIONS_END, others, args.check,
                             "other directions' tables", fix)
    return status | write_or_check(args.details, DETAILS_START, DETAILS_END, models, args.check,
                                   "every-model table", fix)


if __name__ == "__main__":
    sys.exit(main())
