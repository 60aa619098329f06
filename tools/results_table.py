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
hardware between <!-- models:start --> and <!-- models:end -->. A row's words name the corpora its model read beyond
Multi30k's pairs (data.train_corpora: back-translation, forward translation, distillation, with their tags).

The recipe table, between <!-- recipe:start --> and <!-- recipe:end --> of the details file, sets every
German→English model with data.train_corpora beside the baseline multi30k_transformer (its seeds and ensemble):
BLEU and chrF on each test set, with the difference from the baseline of the model's seed (an ensemble's: the
baseline's ensemble) and sacrebleu's paired bootstrap. Each such model's bootstrap is kept in its folder's
bootstrap.json with the sha256 of the two translation files it compared; it is recomputed (against the Multi30k
references: NMT_DATA_MIRROR, else ../shared/data/multi30k, else the download cache) only when those change, and
--check only verifies that it is current. --check writes nothing and exits 1 if any block or bootstrap.json is not
current.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import statistics
import sys
from collections.abc import Callable, Iterator
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
from nmt.compare import p_text, paired_bootstrap
from nmt.config import Config, CorpusConfig, DataConfig, load_config
from nmt.config.sections import BILINGUAL
from nmt.data import MIRROR_ENV, MULTI30K_SPLITS, MULTI30K_TEST_SETS, fetch_multi30k, normalize, read_pair
from nmt.errors import DataError, FileError
from nmt.fileio import describe_os_error, write_json
from nmt.run.folder import RunDir
from tools.archive import SPLITS, group_of

MODULE = "tools.results_table"
START, END = "<!-- results:start -->", "<!-- results:end -->"
DETAILS_START, DETAILS_END = "<!-- models:start -->", "<!-- models:end -->"
DIRECTIONS_START, DIRECTIONS_END = "<!-- directions:start -->", "<!-- directions:end -->"
RECIPE_START, RECIPE_END = "<!-- recipe:start -->", "<!-- recipe:end -->"
README_DIRECTION = "de-en"  # the README's tables and anchors; the other directions' tables go in the details file
LANGUAGES = {"de": "German", "en": "English"}
TITLES = {"test": "test2016", "test2017": "test2017", "mscoco2017": "mscoco2017", "test2018": "test2018"}
ATTENTION = {"additive": "Bahdanau (additive) attention", "dot": "dot attention", "general": "general attention"}
FAMILIES = {"transformer": "Transformer", "rnn": "GRU"}
CORPORA = {  # the recipe's files (docs/training.md), source and target (.gz or not), and what such a corpus is
    ("task2.bt.de", "task2.en"): "back-translation",
    ("task2.bt_greedy.de", "task2.en"): "greedy back-translation",
    ("task2.de", "task2.ft.en"): "forward translation",
    ("train.de", "train.distil.en"): "distillation",
    ("task2.de", "task2.ft_greedy.en"): "forward translation by the greedy chain's teacher",
    ("train.de", "train.distil_greedy.en"): "distillation by the greedy chain's teacher",
    ("train.de", "train.en"): "Multi30k's pairs again",
}
BASELINE = "multi30k_transformer"  # the group every model of the recipe table is measured against, seed by seed
BASELINE_ENSEMBLE = "multi30k_transformer_ensemble"  # what an ensemble of the recipe table is measured against
BOOTSTRAP = "bootstrap.json"  # a recipe model's paired bootstrap against its baseline, in its archive folder
RESAMPLES, BOOTSTRAP_SEED = 1000, 12345
References = Callable[[str, str], list[str]]  # (test set, language) -> its references
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


def _corpus(corpus: CorpusConfig) -> tuple[str | None, str, str]:
    """What a training corpus is, as CORPORA names it by its files (None for another), and its files, tag and
    weight in words."""
    names = tuple(Path(path).name.removesuffix(".gz") for path in corpus.files)
    settings = [f"tagged `{corpus.tag}`"] * bool(corpus.tag) + [f"weight {corpus.weight:g}"] * (corpus.weight != 1)
    return CORPORA.get(names), ", ".join(settings), ", ".join(f"`{name}`" for name in names)


def corpora(cfg: Config) -> str:
    """The training corpora a model read beyond its dataset's own pairs (data.train_corpora), in words: " +
    back-translation (tagged `<bt>`)", "" for none; a corpus of other files is counted and its files named."""
    known, others = [], []
    for corpus in cfg.data.corpora:
        what, settings, files = _corpus(corpus)
        if what:
            known.append(what + (f" ({settings})" if settings else ""))
        else:
            others.append(files + (f", {settings}" if settings else ""))
    if others:
        known.append(f"{len(others)} more {'corpus' if len(others) == 1 else 'corpora'} ({'; '.join(others)})")
    return "".join(f" + {words}" for words in known)


def recipe(cfg: Config) -> tuple[int, str]:
    """(sort key, words) for a model's architecture, the corpora it read beyond its dataset, and its training
    budget."""
    m, t = cfg.model, cfg.train
    if m.arch == "transformer":
        name = "Transformer" + ("" if m.self_attention == "full" else f", {m.self_attention} self-attention")
    else:
        name = "GRU, no attention" if m.attention == "none" else f"GRU + {ATTENTION.get(m.attention, m.attention)}"
    name += corpora(cfg)
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
    if recipe_models(models):
        others += (" The models trained on more than Multi30k's pairs against the baseline of their seed, with the "
                   "paired bootstrap: [docs/training.md](docs/training.md#more-data-through-the-model-the-recipe).")
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


# ---------------------------------------------------------------------------------------------- the recipe table


def references(root: Path = ROOT, split: str = "test", language: str = "en") -> list[str]:
    """The references of a Multi30k test set (test: test2016, test2017, mscoco2017, test2018) in `language`
    (en or de), normalized as nmt-evaluate scores them (checksums verified)."""
    mirror = os.environ.get(MIRROR_ENV, "")
    beside = root.resolve().parent / "shared" / "data" / "multi30k"
    if not mirror and beside.is_dir():
        mirror = str(beside)
    stems = MULTI30K_SPLITS | MULTI30K_TEST_SETS
    if split not in stems or split in ("train", "val"):
        raise DataError(f"{split}: not a Multi30k test set (test, {', '.join(MULTI30K_TEST_SETS)})")
    sides = BILINGUAL["multi30k"]  # the languages of each pair fetch_multi30k gives, in its order
    if language not in sides:
        raise DataError(f"{language}: not a language of Multi30k ({', '.join(sides)})")
    files = fetch_multi30k(DataConfig(dataset="multi30k", mirror=mirror,
                                      download_dir=str(root / "data" / "downloads")), log=lambda _msg: None,
                           splits={split: stems[split]})
    return [normalize(line, False) for line in read_pair(*files[split])[sides.index(language)]]


@contextlib.contextmanager
def sacrebleu_seed(seed: str) -> Iterator[None]:
    """sacrebleu's paired bootstrap takes its seed from the environment."""
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = seed
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def _seed(model: Model) -> int:
    return model.run.get("seed", model.cfg.train.seed)


def recipe_models(models: list[Model]) -> list[Model]:
    """The German→English models trained on more than their dataset's pairs (data.train_corpora)."""
    return [m for m in models if m.direction == README_DIRECTION and m.cfg.data.train_corpora and m.group != BASELINE]


def baseline_of(model: Model, models: list[Model], results: Path) -> Model:
    """The model a recipe model is measured against: the baseline of its seed, or the baseline's ensemble."""
    name = BASELINE_ENSEMBLE if model.kind == "ensemble" else f"{BASELINE}_seed{_seed(model)}"
    found = next((m for m in models if m.name == name), None)
    if found is None:
        raise FileError(f"{results / model.name}: no {name} archived in {results} to measure it against")
    return found


def _hypotheses(results: Path, model: Model, split: str) -> Path:
    return RunDir(results / model.name).hypotheses(split, model.cfg.data.languages[1])


def _inputs(results: Path, model: Model, baseline: Model) -> dict[str, dict[str, str]]:
    """The sha256 of the translations the bootstrap compares, on each test set both models were decoded on."""
    found = {}
    for split in SPLITS:
        paths = {"model": _hypotheses(results, model, split), "baseline": _hypotheses(results, baseline, split)}
        if all(path.is_file() for path in paths.values()):
            found[split] = {who: hashlib.sha256(path.read_bytes()).hexdigest() for who, path in paths.items()}
    return found


def _computed(results: Path, model: Model, baseline: Model, refs: References) -> dict[str, Any]:
    """`model`'s paired bootstrap against `baseline` on each test set, BLEU and chrF, with what it compared."""
    splits = {}
    with sacrebleu_seed(str(BOOTSTRAP_SEED)):
        for split, sha256 in _inputs(results, model, baseline).items():
            systems = [(who.name, _hypotheses(results, who, split).read_text(encoding="utf-8").split("\n")[:-1])
                       for who in (baseline, model)]
            found, signatures = paired_bootstrap(systems, refs(split, model.cfg.data.languages[1]), RESAMPLES)
            splits[split] = {"sha256": sha256, "signatures": signatures,
                             **{metric: {"baseline": found[baseline.name][metric], "model": found[model.name][metric]}
                                for metric in ("bleu", "chrf")}}
    return {"model": model.name, "baseline": baseline.name, "test": "paired bootstrap resampling (sacrebleu)",
            "resamples": RESAMPLES, "seed": BOOTSTRAP_SEED, "command": f"python -m {MODULE}", "splits": splits}


def _current(results: Path, model: Model, baseline: Model) -> dict[str, Any] | None:
    """`model`'s bootstrap.json when it compares today's translations of `model` and `baseline` as this
    module does, else None."""
    path = results / model.name / BOOTSTRAP
    if not path.is_file():
        return None
    record = read_json(path)
    with blamed(path):
        current = ((record["baseline"], record["resamples"], record["seed"]) == (baseline.name, RESAMPLES,
                                                                                 BOOTSTRAP_SEED)
                   and {split: entry["sha256"] for split, entry in record["splits"].items()}
                   == _inputs(results, model, baseline))
    return record if current else None


def bootstraps(results: Path, refs: References | None = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each recipe model's paired bootstrap against its baseline, by model name: its bootstrap.json where that
    is current, else computed afresh with `refs` (for the caller to write); without `refs`, a stale or missing
    file is left out and named in the problems."""
    models = read_models(results)
    records, problems = {}, []
    for model in recipe_models(models):
        baseline = baseline_of(model, models, results)
        record = _current(results, model, baseline)
        if record is None and refs is not None:
            record = _computed(results, model, baseline, refs)
        if record is None:
            problems.append(f"{results / model.name / BOOTSTRAP}: missing or not current (the translations of "
                            f"{model.name} or {baseline.name} changed); run `python -m {MODULE}`")
        else:
            records[model.name] = record
    return records, problems


def recomputed(results: Path, name: str, refs: References) -> dict[str, Any]:
    """The paired bootstrap of the recipe model `name` against its baseline, computed afresh from their
    translations: what its bootstrap.json holds when nothing was edited by hand."""
    models = read_models(results)
    model = next(m for m in recipe_models(models) if m.name == name)
    return _computed(results, model, baseline_of(model, models, results), refs)


def write_bootstraps(results: Path, records: dict[str, dict[str, Any]]) -> None:
    """Each record in its model's bootstrap.json, where that does not hold it already."""
    for name, record in records.items():
        path = results / name / BOOTSTRAP
        if not path.is_file() or read_json(path) != record:
            write_json(path, record)


def _verdict(pairs: list[tuple[float, float]], resamples: int) -> str:
    """The difference from the baseline and the bootstrap's verdict, from (difference, p) of each model: one
    model's p, or for seeds their mean difference and how many are better or worse than their own baseline at
    p < 0.05."""
    if len(pairs) == 1:
        delta, p_value = pairs[0]
        return f"{delta:+.2f}, p {p_text(p_value, resamples)}"
    counts = [f"{count}/{len(pairs)} {side}*" for side, count in (
        ("better", sum(d > 0 and p < 0.05 for d, p in pairs)),
        ("worse", sum(d < 0 and p < 0.05 for d, p in pairs))) if count]
    return f"{statistics.mean(d for d, _ in pairs):+.2f}; {', '.join(counts) or 'none differs'}"


def _recipe_cells(models: list[Model], baselines: dict[str, Model], records: dict[str, dict[str, Any]]) -> list[str]:
    """BLEU and chrF on each test set (a model's, or the seeds' mean ± std), each with its verdict against the
    baseline when `baselines` pairs the models with theirs."""
    cells = []
    for split in SPLITS:
        for metric in ("bleu", "chrf"):
            values = [m.scores[split][metric] for m in models if split in m.scores]
            if len(values) != len(models):
                cells.append("–")
                continue
            entries = [records[m.name]["splits"].get(split) for m in models] if baselines else [None]
            if None in entries:  # the baseline itself, or a test set its baseline was not decoded on
                cells.append(_mean(values))
                continue
            pairs = [(m.scores[split][metric] - baselines[m.name].scores[split][metric],
                      entry[metric]["model"]["p_value"]) for m, entry in zip(models, entries)]
            cells.append(f"{_mean(values)} ({_verdict(pairs, records[models[0].name]['resamples'])})")
    return cells


def recipe_table(results: Path, records: dict[str, dict[str, Any]]) -> str:
    """The recipe block: the baseline (its seeds, then its ensemble) and each recipe group (its seeds, then its
    ensembles) on every test set, BLEU and chrF, each recipe model with its paired bootstrap (`records`,
    as `bootstraps` gives them) against the baseline of its seed."""
    models = read_models(results)
    recipes = recipe_models(models)
    if not recipes:
        return (f"No {direction_title(README_DIRECTION)} model trained on more than Multi30k's pairs "
                "(data.train_corpora) is archived.\n")
    groups: dict[str, list[Model]] = {BASELINE: [m for m in models if m.group == BASELINE]}
    for model in sorted(recipes, key=lambda m: (len(m.cfg.data.train_corpora), m.group, m.name)):
        groups.setdefault(model.group, []).append(model)
    lines = [f"Paired bootstrap: sacrebleu, {RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED} (≤ {1 / RESAMPLES:g}: the "
             f"smallest p-value {RESAMPLES:,} resamples can give); each model's in "
             f"`results/multi30k/<name>/{BOOTSTRAP}`.", "",
             *table_header(["model", "runs", *(f"{TITLES[s]} {metric}" for s in SPLITS for metric in ("BLEU", "chrF"))],
                           "ll" + "r" * 2 * len(SPLITS))]
    for group, members in groups.items():
        mine = {m.name: baseline_of(m, models, results) for m in members} if group != BASELINE else {}
        runs = sorted((m for m in members if m.kind != "ensemble"), key=_seed)
        words = ("Baseline: " if group == BASELINE else "") + recipe((runs or members)[0].cfg)[1]
        if runs:
            seeds = [_seed(m) for m in runs]
            who = f"{len(runs)} seeds ({', '.join(map(str, seeds))})" if len(runs) > 1 else f"seed {seeds[0]}"
            lines.append(markdown_row([f"{words}: `{group}`", who, *_recipe_cells(runs, mine, records)]))
        for ensemble in (m for m in members if m.kind == "ensemble"):
            lines.append(markdown_row([f"{words}: ensemble `{ensemble.name}`",
                                       f"{len(ensemble.run['members'])} models",
                                       *_recipe_cells([ensemble], mine, records)]))
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "multi30k", help="archive folder")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="file holding the results block")
    parser.add_argument("--details", type=Path, default=ROOT / "docs" / "training.md",
                        help="file holding the other directions', the recipe and the every-model blocks")
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
        _has_markers(args.details, ((DIRECTIONS_START, DIRECTIONS_END), (DETAILS_START, DETAILS_END),
                                    (RECIPE_START, RECIPE_END)))
    records, stale = bootstraps(args.results, None if args.check else lambda split, language: references(
        ROOT, split, language))
    recipes = recipe_table(args.results, records) if not stale else ""
    for problem in stale:
        print(problem, file=sys.stderr)
    if not args.check:
        write_bootstraps(args.results, records)
    status = write_or_check(args.readme, START, END, results, args.check, "results tables", fix)
    status |= write_or_check(args.details, DIRECTIONS_START, DIRECTIONS_END, others, args.check,
                             "other directions' tables", fix)
    status |= write_or_check(args.details, DETAILS_START, DETAILS_END, models, args.check, "every-model table", fix)
    if stale:  # only with --check: the recipe table cannot be built without its bootstraps
        return 1
    return status | write_or_check(args.details, RECIPE_START, RECIPE_END, recipes, args.check, "recipe table", fix)


if __name__ == "__main__":
    sys.exit(main())
