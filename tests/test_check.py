"""`make check` (tools/check.py): on a copy of the committed files (the results archive in it made up by
tests/synthetic_archive.py, so that no committed run is needed), a one-character edit of a figure in the README, a
report, a JSON or of one translation line makes it fail; it reads only what git tracks, so a comparison of one's own
never fails it. And `make check` itself on this checkout, one test per kind of check (so that `make test` runs it
once, its parts beside the other tests)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from nmt.compare import paired_bootstrap
from tests.conftest import REPO, tiny_config
from tests.synthetic_archive import archive_folder, references
from tools import results_table
from tools.archive import SPLITS

RUN = "tiny_transformer"  # the made-up archived run whose files are edited
EN_DE = "tiny_transformer_en_de"  # a made-up English→German run beside it, its translations and references German


@pytest.fixture(scope="module")
def scripts() -> dict[str, ModuleType]:
    return {name: importlib.import_module(module) for name, module in (("check", "tools.check"),
                                                                       ("compare_suite", "benchmarks.compare_suite"))}


def _archive(root: Path) -> Path:
    """A made-up results/multi30k holding RUN and EN_DE, archived on the four test sets, under `root`."""
    results, configs = root / "results" / "multi30k", root / "configs"
    archive_folder(results, EN_DE, tiny_config(configs, EN_DE, data={"direction": "en-de"}))
    return archive_folder(results, RUN, tiny_config(configs, RUN)).parent


@pytest.mark.parametrize("kind", ["blocks", "commands", "scores", "bootstrap"])
def test_the_committed_figures_match_their_evidence(scripts, kind):
    """`make check` on this checkout; without the Multi30k test references the scores fail, as make check does."""
    assert kind in scripts["check"].KINDS
    assert scripts["check"].run_checks(REPO, (kind,)) == []


def _copy(root: Path, *paths: str) -> Path:
    for path in paths:
        source, target = REPO / path, root / path
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    """Replace the first `old` in `path` by `new` (a one-character change in these tests)."""
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _figure(path: Path, pattern: str) -> str:
    """The first text matching `pattern` in `path`: the figure an edit changes."""
    found = re.search(pattern, path.read_text(encoding="utf-8"))
    assert found, f"{pattern} not in {path}"
    return found.group(0)


def _bump(path: Path, pattern: str) -> None:
    """Change the last digit of the first figure matching `pattern` in `path`."""
    figure = _figure(path, pattern)
    _edit(path, figure, figure[:-1] + str((int(figure[-1]) + 1) % 10))


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of everything the blocks check reads, with a made-up results archive and the README and
    docs/training.md blocks written from it."""
    root = _copy(tmp_path / "repo", "README.md", "docs", "reports/multi30k/compare.json", "reports/multi30k/compare.md",
                 "reports/multi30k/suite.json", "benchmarks/results")
    results = _archive(root)
    assert results_table.main(["--results", str(results), "--readme", str(root / "README.md"),
                               "--details", str(root / "docs" / "training.md")]) == 0
    return root


def _archived_bleu(root: Path, run: str = RUN, start: str = results_table.START) -> str:
    """The cell of `run`'s test2016 BLEU in the table after `start` (what sacrebleu gave the made-up
    translations)."""
    bleu = json.loads((root / "results" / "multi30k" / run / "eval_test.json").read_text())["scores"]["bleu"]
    return rf"(?s){re.escape(start)}.*?\| {re.escape(f'{bleu:.2f}')}"


BLOCK_EDITS: dict[str, Callable[[Path], None]] = {
    "readme-results": lambda root: _bump(root / "README.md", _archived_bleu(root)),
    "docs-directions": lambda root: _bump(root / "docs" / "training.md",
                                          _archived_bleu(root, EN_DE, results_table.DIRECTIONS_START)),
    "readme-speed": lambda root: _bump(root / "README.md", r"\| 2,78\d"),
    "docs-comparison": lambda root: _bump(root / "docs" / "comparing.md", r"\| transformer/full \| \d+\.\d\d"),
    "docs-benchmarks": lambda root: _bump(root / "docs" / "benchmarks.md", r"\| 692\.5"),
    "docs-config": lambda root: _bump(root / "docs" / "config.md", r"\| `window` \| int \| `8"),
    "report-json": lambda root: _bump(root / "results" / "multi30k" / RUN / "eval_test.json", r'"chrf": [\d.]+'),
    "compare-json": lambda root: _bump(root / "reports" / "multi30k" / "compare.json", r'"bleu": \d+\.\d+'),
    "compare-md": lambda root: _bump(root / "reports" / "multi30k" / "compare.md", r"\| ok \| \d+\.\d\d"),
    "bench-json": lambda root: _bump(root / "benchmarks" / "results" / "train_multi30k_transformer_cpu.json",
                                     r'"tgt_tokens_per_s": 2779\.9'),
    "data-json": lambda root: _bump(root / "benchmarks" / "results" / "data_5000000_cpu.json", r'"seconds": 191\.3'),
}


@pytest.mark.parametrize("edit", list(BLOCK_EDITS))
def test_one_character_edit_of_a_figure_fails_the_blocks_check(scripts, tree, edit):
    before = scripts["check"].blocks(tree)
    BLOCK_EDITS[edit](tree)
    new = [p for p in scripts["check"].blocks(tree) if p not in before]
    assert new and all("differs" in p for p in new)


@pytest.fixture
def scored(tmp_path) -> Path:
    """A tree holding one archived run's reports and translations on the four test sets."""
    root = tmp_path / "repo"
    _archive(root)
    return root


def test_an_archived_translation_file_rescores_to_its_report(scripts, scored):
    """Each test set's translations, re-scored by the check against that set's references, give the scores
    sacrebleu gave when they were archived."""
    assert len(list(scored.glob("results/multi30k/*/*.hyp.en"))) == 4
    assert scripts["check"].scores(scored, references) == []


def test_an_english_german_archive_is_rescored_against_the_german_references(scripts, scored):
    """The English→German run's translations are German (<split>.hyp.de), and only its German references give the
    scores it was archived with; one edited German line is caught."""
    folder = scored / "results" / "multi30k" / EN_DE
    assert sorted(p.name for p in folder.glob("*.hyp.*")) == [f"{split}.hyp.de" for split in sorted(SPLITS)]
    asked = set()

    def refs(split: str, language: str) -> list[str]:
        asked.add((split, language))
        return references(split, language)

    assert scripts["check"].scores(scored, refs) == []
    assert asked == {(split, language) for split in SPLITS for language in ("en", "de")}
    english = scripts["check"].scores(scored, lambda split, _language: references(split, "en"))
    assert english and all(str(folder) in p for p in english)  # German translations against English references
    hyps = (folder / "test2017.hyp.de").read_text(encoding="utf-8")
    (folder / "test2017.hyp.de").write_text("x" + hyps[1:], encoding="utf-8")
    problems = scripts["check"].scores(scored, references)
    assert problems and all(str(folder / "eval_test2017.json") in p for p in problems)


@pytest.mark.parametrize("split", ["test", "test2018"])
@pytest.mark.parametrize("edit", ["report", "hypothesis"])
def test_an_edited_score_or_translation_line_fails_the_rescoring(scripts, scored, edit, split):
    folder = scored / "results" / "multi30k" / RUN
    if edit == "report":
        _bump(folder / f"eval_{split}.json", r'"ter": [\d.]+')
    else:  # one character of the first translation
        hyps = (folder / f"{split}.hyp.en").read_text(encoding="utf-8")
        (folder / f"{split}.hyp.en").write_text("x" + hyps[1:], encoding="utf-8")
    problems = scripts["check"].scores(scored, references)
    assert problems and all(str(folder / f"eval_{split}.json") in p for p in problems)


def test_the_bootstrap_recomputes_from_its_seed_and_catches_an_edited_p_value(scripts, tmp_path):
    """A small comparison of two made-up systems, laid out as reports/multi30k is (compare.json and each run's
    translations), is recomputed to the digit; one edited p-value is named."""
    refs = [f"a dog runs on the grass number {i} ." for i in range(40)]
    systems = [("base", [r if i % 3 else "a cat ." for i, r in enumerate(refs)]),
               ("other", [r if i % 4 else "a dog ." for i, r in enumerate(refs)])]
    result, signatures = paired_bootstrap(systems, refs, resamples=200)
    report = tmp_path / "repo" / "reports" / "multi30k"
    for name, hyps in systems:
        (report / "runs" / name).mkdir(parents=True)
        (report / "runs" / name / "test.hyp.en").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    data = {"significance": {"resamples": 200, "signatures": signatures,
                             "runs": {name: {"baseline": "base", **result[name]} for name, _ in systems}}}
    (report / "compare.json").write_text(json.dumps(data), encoding="utf-8")
    check = scripts["check"]
    assert check.bootstrap(tmp_path / "repo", refs, "other") == []
    data["significance"]["runs"]["other"]["chrf"]["p_value"] = 0.002
    (report / "compare.json").write_text(json.dumps(data), encoding="utf-8")
    problems = check.bootstrap(tmp_path / "repo", refs, "other")
    assert len(problems) == 1 and "other.chrf" in problems[0]


# ---------------------------------------------------------------------------------------------- commands


@pytest.mark.parametrize(("command", "why"), [
    ("python -m benchmarks.train configs/multi30k_transformer.yaml --secnds 60", "refuses its arguments"),
    ("python scripts/bench_train.py configs/multi30k_transformer.yaml --seconds 60", "does not exist"),  # moved
    ("python -m benchmarks.check", "does not exist"),  # moved to tools/
    ("python -m benchmarks.no_such_benchmark", "does not exist"),
    ("python -m json.tool x.json", "not one of this repository's"),
    ("python scripts/no_such_script.py", "does not exist"),
    ("make no-such-target CONFIG=configs/sample_transformer.yaml", "no target no-such-target"),
    ("fairseq-train data-bin --arch transformer", "is not a module, script, make target or nmt command"),
    ("python -m benchmarks.serve 'runs/x", "cannot be split"),
])
def test_a_recorded_command_that_would_not_run_today_is_a_problem(command, why):
    from tools.commands import problem

    found = problem(command)
    assert found is not None and why in found, found


@pytest.mark.parametrize("command", [
    'make train CONFIG=configs/multi30k_transformer.yaml SET="--set train.threads=1"; resumed at epoch 19 with more',
    "nmt-evaluate runs/multi30k_transformer --split test --beam 5",
    "/somewhere/.venv/bin/nmt-train configs/sample_transformer.yaml --restart",
    "python scripts/demo.py",
    "python -m benchmarks.decode runs/x --split test --export float32 int8",
    "python -m tools.check --only blocks",
    "python -m tools.archive run runs/x --beside 'one thread; the other core trained y'",  # a ; inside quotes
])
def test_commands_that_run_today_are_accepted(command):
    from tools.commands import problem

    assert problem(command) is None


def test_an_edited_command_in_a_committed_result_fails_the_commands_check(scripts, tmp_path):
    root = _copy(tmp_path / "repo", "benchmarks/results")
    assert scripts["check"].commands(root) == []
    _edit(root / "benchmarks" / "results" / "train_multi30k_transformer_cpu.json", "--seconds 60", "--secnds 60")
    problems = scripts["check"].commands(root)
    assert len(problems) == 1 and "train_multi30k_transformer_cpu.json: command" in problems[0], problems


# ---------------------------------------------------------------------------------------------- what is committed


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_comparison_of_ones_own_never_fails_the_check(scripts, trained_copy, tmp_path):
    """`make compare SUITE=sample` (benchmarks.compare_suite, on one run here) writes its report beside the
    committed files, not over reports/multi30k; the check reads only what git tracks, also where committed
    comparisons lie (reports/<name>/runs/). Added to git there, the report is checked: its 80 sample
    translations are not the test set's sentences."""
    suite, check = scripts["compare_suite"], scripts["check"]
    assert suite.default_out("multi30k") != Path("reports") / "multi30k"
    repo = _copy(tmp_path / "repo", "Makefile")  # the targets its commands name
    _archive(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "results", "Makefile")
    config, _ = trained_copy  # trained already: the suite only evaluates it again, then compares
    out = repo / suite.default_out("sample")
    args = Namespace(suite="sample", budget=None, restart=False, baseline=[])
    assert suite.run_suite(args, [config], ["--set", "train.threads=1"], out) == 0  # as `--set train.threads=1`
    assert (out / "compare.json").is_file() and (out / "runs" / "shared" / "test.hyp.en").is_file()
    assert "threads: 1\n" in (out / "runs" / "shared" / "config.yaml").read_text(encoding="utf-8")
    trained = json.loads((out / "compare.json").read_text())
    # --only with no name trains nothing: the report is assembled again from the copies alone
    args.only = []
    assert suite.run_suite(args, [config], [], out) == 0
    again = json.loads((out / "compare.json").read_text())
    assert again["diagnostics"] == trained["diagnostics"] and again["significance"] == trained["significance"]
    assert [r["config"] for r in json.loads((out / "suite.json").read_text())["runs"]] == [str(config)]
    assert check.run_checks(repo, ("commands", "scores"), refs=references) == []
    beside = repo / "reports" / "sample"  # where the committed comparisons are re-scored from
    shutil.copytree(out, beside)
    assert check.run_checks(repo, ("commands", "scores"), refs=references) == []
    _git(repo, "add", "reports/sample")
    problems = check.run_checks(repo, ("commands", "scores"), refs=references)
    assert problems and all(str(beside) in p for p in problems), problems
    assert any("80 lines" in p for p in problems)


# ---------------------------------------------------------------------------------------------- links

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", ["README.md", *sorted(p.relative_to(REPO).as_posix()
                                                      for p in (REPO / "docs").glob("*.md"))])
def test_every_relative_link_resolves(page):
    """Every relative link of the README and the docs pages points to a file (and heading) that exists."""
    source = REPO / page
    broken = []
    for target in LINK.findall(source.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{page}: broken links {broken}"


def test_the_readme_is_a_front_page():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200 and len(list((REPO / "docs").glob("*.md"))) >= 5
