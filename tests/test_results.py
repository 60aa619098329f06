"""The results archive (tools.archive) and the tables built from it (tools.results_table): a finished run
and an ensemble archived on every test set of their dataset with what reproduces them, the seeds of one recipe as
mean ± sample standard deviation, and `make check` re-scoring each test set's translations against that set's
own references."""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from pathlib import Path

import pytest
import sacrebleu

from nmt.cli import evaluate_parser, train_main
from nmt.config import load_config
from nmt.data import sample_dir
from nmt.errors import DataError
from nmt.evaluation import Scorer
from nmt.run.folder import RunDir
from tests import synthetic_archive as synthetic
from tests.conftest import REPO, fails_cleanly, tiny_config
from tests.synthetic_archive import archive_folder, sacrebleu_scores
from tools import archive, check, results_table, val_table

ARGV = ["run", "runs/x", "--beside", "nothing"]
COMMIT = "0123456789abcdef"


@pytest.fixture(scope="module")
def archived(trained_run, tmp_path_factory) -> Path:
    """Two copies of the shared run archived as two seeds of one recipe, and their ensemble."""
    results, runs = tmp_path_factory.mktemp("results"), tmp_path_factory.mktemp("runs")
    for seed in (1, 2):
        shutil.copytree(trained_run, runs / f"tiny_seed{seed}")
        archive.archive_run(runs / f"tiny_seed{seed}", f"tiny_seed{seed}", COMMIT, "nothing", ARGV, results)
    archive.archive_ensemble([runs / "tiny_seed1", runs / "tiny_seed2"], "tiny_ensemble", COMMIT, "a test", ARGV,
                             results)
    return results


def test_an_archived_run_holds_what_reproduces_and_rescores_it(archived, trained_run):
    folder = archived / "tiny_seed1"
    run, report = (json.loads((folder / name).read_text()) for name in ("run.json", "eval_test.json"))
    own = json.loads((trained_run / "eval_test.json").read_text())
    checkpoint = Path(report["members"][0]["path"])
    assert run["sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest() == report["members"][0]["sha256"]
    assert checkpoint.parent.parent.name == "tiny_seed1" and run["updates"] == own["members"][0]["steps"]
    assert run["commit"] == COMMIT and run["beside"] == "nothing" and run["group"] == "tiny"
    assert run["training_command"] == own["command"] and run["hardware"] and run["date"]
    for name in ("metrics.jsonl", "config.yaml"):
        assert (folder / name).read_bytes() == (trained_run / name).read_bytes()
    # The recorded command decodes the same split with the run's own validation-chosen settings.
    prog, *argv = shlex.split(report["command"])
    args = evaluate_parser().parse_args(argv)
    assert prog == "nmt-evaluate" and args.models == [str(checkpoint.parent.parent)] and args.split == "test"
    assert (args.beam, args.length_penalty) == (own["decode"]["beam"], own["decode"]["length_penalty"])
    assert report["decode"] == own["decode"]
    # sacrebleu itself gives the report's scores from the committed translations.
    hyps = (folder / "test.hyp.en").read_text(encoding="utf-8").splitlines()
    refs = (sample_dir() / "test.en").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(refs) == report["sentences"]
    assert round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2) == report["scores"]["bleu"]
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml", "eval_test.json", "metrics.jsonl",
                                                         "run.json", "test.hyp.en"]  # the sample's one test set


def test_an_archived_ensemble_names_its_members_and_decodes_them_together(archived):
    run, report = (json.loads((archived / "tiny_ensemble" / name).read_text()) for name in ("run.json",
                                                                                             "eval_test.json"))
    assert run["kind"] == "ensemble" and [m["run"] for m in run["members"]] == ["tiny_seed1", "tiny_seed2"]
    assert [m["sha256"] for m in run["members"]] == [m["sha256"] for m in report["members"]]
    assert " -c " in report["command"] and run["group"] == "tiny" and run["commit"] == COMMIT


def test_seeds_of_one_recipe_share_a_row_as_mean_and_sample_standard_deviation(archived, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(archived, results)
    for seed, bleu in ((1, 30.0), (2, 32.0)):
        report = results / f"tiny_seed{seed}" / "eval_test.json"
        data = json.loads(report.read_text())
        data["scores"]["bleu"] = bleu
        report.write_text(json.dumps(data))
    text = results_table.tables(results)
    row = next(line for line in text.splitlines() if "`tiny`" in line)
    assert "| 2 seeds (1) |" in row and "| 31.00 ± 1.41 |" in row and "| 0123456 |" in row
    assert row.split(" | ").count("–") == 3  # no test2017, mscoco2017 or test2018 in the sample
    assert "ensemble `tiny_ensemble` | 2 models |" in text and "Published anchors" in text and "40.5 / 41.5" in text
    details = results_table.details(results)
    assert details.count("| 0123456 |") == 3 and "ensemble of `tiny_seed1`, `tiny_seed2`" in details


def test_the_tables_refuse_a_model_whose_run_json_names_no_commit(archived, tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(archived, results)
    run_file = results / "tiny_seed2" / "run.json"
    run = json.loads(run_file.read_text())
    del run["commit"]
    run_file.write_text(json.dumps(run))
    readme, details = tmp_path / "README.md", tmp_path / "training.md"
    for path, start, end in ((readme, results_table.START, results_table.END),
                             (details, results_table.DETAILS_START, results_table.DETAILS_END)):
        path.write_text(f"{start}\n{end}\n")
    fails_cleanly(results_table.main, ["--results", str(results), "--readme", str(readme), "--details",
                                       str(details)], capsys, tmp_path, f"{run_file}: names no commit")


def test_archive_refuses_an_unfinished_run_and_a_name_leading_outside(trained_run, tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    unfinished = tmp_path / "unfinished"
    shutil.copytree(trained_run, unfinished)
    (unfinished / "eval_test.json").unlink()
    fails_cleanly(archive.main, ["run", str(unfinished), "--beside", "x", "--results", str(results)], capsys,
                  tmp_path, "has the run finished")
    fails_cleanly(archive.main, ["run", str(trained_run), "--as", "../out", "--beside", "x", "--results",
                                 str(results)], capsys, tmp_path, "a plain folder name")


def test_an_archive_that_fails_midway_leaves_the_earlier_one_as_it_was(archived, trained_run, tmp_path, monkeypatch):
    results = tmp_path / "results"
    shutil.copytree(archived / "tiny_seed1", results / "tiny_seed1")
    before = {p.name: p.read_bytes() for p in (results / "tiny_seed1").iterdir()}

    def broken(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(archive, "write_report", broken)
    with pytest.raises(OSError):
        archive.archive_run(trained_run, "tiny_seed1", COMMIT, "nothing", ARGV, results)
    assert {p.name: p.read_bytes() for p in (results / "tiny_seed1").iterdir()} == before


def test_check_rescores_each_test_sets_translations_against_its_own_references(tmp_path):
    """A test2017.hyp.en is scored against test2017's references, not test2016's: here the two sets' references
    differ, and the file holds test2017's, so only the right pairing gives the report's scores."""
    refs = {"test": ["A dog runs .", "Two kids play ."], "test2017": ["A man rides a bike .", "A cat sleeps ."]}
    folder = tmp_path / "results" / "m"
    folder.mkdir(parents=True)
    for split in refs:
        (folder / f"{split}.hyp.en").write_text("".join(line + "\n" for line in refs["test2017"]))
        scores = Scorer(refs[split])(refs["test2017"])
        (folder / f"eval_{split}.json").write_text(json.dumps({"sentences": 2, "scores": scores}))
    english = {"en": refs}
    assert check.scores(tmp_path, lambda split, language: english[language][split]) == []
    report = folder / "eval_test2017.json"
    report.write_text(report.read_text().replace('"bleu": 100.0', '"bleu": 99.0'))
    problems = check.scores(tmp_path, lambda split, language: english[language][split])
    assert len(problems) == 1 and "eval_test2017.json: scores.bleu is 99.0" in problems[0]


@pytest.mark.parametrize("split, lines", [("test", 1000), ("test2017", 1000), ("mscoco2017", 461),
                                          ("test2018", 1071)])
def test_check_reads_the_references_of_each_multi30k_test_set_in_either_language(split, lines):
    try:
        english, german = (check.references(REPO, split, language) for language in ("en", "de"))
    except DataError as err:
        pytest.skip(f"no Multi30k test references here ({err})")
    assert len(english) == len(german) == lines and english == check.references(REPO, split)
    assert sum(e == g for e, g in zip(english, german)) < lines // 10  # two languages, not one file twice


def test_check_refuses_a_split_that_is_no_test_set_and_a_language_multi30k_lacks():
    with pytest.raises(DataError, match="val: not a Multi30k test set"):
        check.references(REPO, "val")
    with pytest.raises(DataError, match="fr: not a language of Multi30k"):
        check.references(REPO, "test", "fr")


# ---------------------------------------------------------------------------------------------- other directions


def _synthetic(tmp_path: Path, names: dict[str, str]) -> Path:
    """A made-up results tree: each name archived with a tiny config of its direction (tests/synthetic_archive)."""
    results = tmp_path / "results"
    for name, direction in names.items():
        archive_folder(results, name, tiny_config(tmp_path / "configs", name, data={"direction": direction}))
    return results


def _marked(folder: Path) -> tuple[Path, Path]:
    """A README and a details file in `folder` holding every block's markers, empty."""
    readme, details = folder / "README.md", folder / "training.md"
    readme.write_text(f"{results_table.START}\n{results_table.END}\n")
    details.write_text("".join(f"text\n{start}\n{end}\n" for start, end in (
        (results_table.DIRECTIONS_START, results_table.DIRECTIONS_END),
        (results_table.RECIPE_START, results_table.RECIPE_END),
        (results_table.DETAILS_START, results_table.DETAILS_END))))
    return readme, details


def test_another_direction_gets_its_own_table_in_the_details_file_not_the_readme(tmp_path):
    results = _synthetic(tmp_path, {"tiny": "de-en", "rev_seed1": "en-de", "rev_seed2": "en-de"})
    readme = results_table.tables(results)
    assert "`tiny`" in readme and "`rev" not in readme and "Published anchors" in readme
    assert "[docs/training.md](docs/training.md#other-directions)" in readme
    others = results_table.directions(results)
    assert others.startswith("**English→German**\n") and "`tiny`" not in others
    row = next(line for line in others.splitlines() if "`rev`" in line)
    bleu = json.loads((results / "rev_seed1" / "eval_test.json").read_text())["scores"]["bleu"]
    assert "| 2 seeds (1) |" in row and f"| {bleu:.2f} ± 0.00 |" in row  # the seeds' mean, from German scores
    details = results_table.details(results)
    assert "| `rev_seed1` (English→German) |" in details and "| `tiny` |" in details


def test_with_german_english_models_only_the_details_file_says_no_other_direction_is_archived(tmp_path):
    results = _synthetic(tmp_path, {"tiny": "de-en"})
    assert "other-directions" not in results_table.tables(results)
    assert "|" not in results_table.directions(results)
    assert results_table.recipe_table(results, {}).startswith("No German→English model trained on more than")


def test_check_notices_a_stale_table_of_another_direction_and_leaves_the_readme_alone(tmp_path, capsys):
    results = _synthetic(tmp_path, {"tiny": "de-en", "rev_seed1": "en-de"})
    readme, details = _marked(tmp_path)
    argv = ["--results", str(results), "--readme", str(readme), "--details", str(details)]
    assert results_table.main(argv) == 0 and results_table.main([*argv, "--check"]) == 0
    assert "**English→German**" in details.read_text() and "`rev" not in readme.read_text()
    archive_folder(results, "rev_seed2", tiny_config(tmp_path / "configs", "rev_seed2", data={"direction": "en-de"}))
    capsys.readouterr()
    assert results_table.main([*argv, "--check"]) == 1
    err = capsys.readouterr().err
    assert "other directions' tables: stale" in err and "results tables" not in err


def test_an_english_german_run_is_archived_with_german_translations_scored_against_german(tmp_path, one_thread):
    config = tiny_config(tmp_path, "reverse", data={"direction": "en-de"}, train={"max_steps": 4, "eval_every": 4})
    assert train_main([str(config)]) == 0
    results = tmp_path / "results"
    folder = archive.archive_run(tmp_path / "runs" / "reverse", "reverse", COMMIT, "nothing", ARGV, results)
    assert sorted(p.name for p in folder.glob("*.hyp.*")) == ["test.hyp.de"]
    hyps = (folder / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    refs = (sample_dir() / "test.de").read_text(encoding="utf-8").splitlines()
    report = json.loads((folder / "eval_test.json").read_text())
    assert len(hyps) == len(refs) == report["sentences"]
    assert round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2) == report["scores"]["bleu"]
    run = json.loads((folder / "run.json").read_text())
    assert run["kind"] == "run" and run["commit"] == COMMIT and run["training_command"].startswith("nmt-train")
    assert "`reverse`" in results_table.directions(results) and "`reverse`" not in results_table.tables(results)


def test_a_details_file_without_the_other_directions_markers_is_refused_before_anything_is_written(tmp_path,
                                                                                                  capsys):
    results = _synthetic(tmp_path, {"tiny": "de-en", "rev_seed1": "en-de"})
    readme, details = tmp_path / "README.md", tmp_path / "training.md"
    readme.write_text(f"{results_table.START}\nold\n{results_table.END}\n")
    details.write_text(f"{results_table.DETAILS_START}\nold\n{results_table.DETAILS_END}\n")
    fails_cleanly(results_table.main, ["--results", str(results), "--readme", str(readme), "--details", str(details)],
                  capsys, tmp_path, f"{details}: no {results_table.DIRECTIONS_START}")


# ---------------------------------------------------------------------------------------------- the recipe table

BT = {"files": ["data/recipe/task2.bt.de", "data/recipe/task2.en"], "tag": "<bt>"}


def _seeded(results: Path, name: str, seed: int, configs: Path, **data) -> Path:
    """A made-up archived run of `seed` (tests/synthetic_archive) whose config has the `data` settings."""
    folder = archive_folder(results, name, tiny_config(configs, name, data=data))
    run = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**run, "seed": seed}))
    return folder


def _retranslated(folder: Path, translate) -> None:
    """A model's translations of each test set replaced by `translate(split)`, its reports re-scored."""
    for split in archive.SPLITS:
        hyps, report_file = translate(split), folder / f"eval_{split}.json"
        (folder / f"{split}.hyp.en").write_text("".join(line + "\n" for line in hyps), encoding="utf-8")
        report = json.loads(report_file.read_text())
        report["scores"] = sacrebleu_scores(hyps, synthetic.references(split))
        report_file.write_text(json.dumps(report))


def _worse(split: str) -> list[str]:
    """Made-up translations below those of synthetic_archive: every third sentence loses its last two words."""
    return [" ".join(line.split()[:-2]) if i % 3 == 0 else line
            for i, line in enumerate(synthetic.translations(split))]


@pytest.fixture
def recipe_results(tmp_path) -> Path:
    """The baseline's seeds 1 and 2 (seed 2 translating worse than seed 1) and a recipe group of the same two
    seeds: seed 1 translating exactly as the baseline's seed 1, seed 2 giving the references themselves."""
    results, configs = tmp_path / "results", tmp_path / "configs"
    for seed in (1, 2):
        _seeded(results, f"{results_table.BASELINE}_seed{seed}", seed, configs)
        _seeded(results, f"rec_seed{seed}", seed, configs, train_corpora=[BT])
    _retranslated(results / f"{results_table.BASELINE}_seed2", _worse)
    _retranslated(results / "rec_seed2", synthetic.references)
    return results


def _refs(split: str, language: str) -> list[str]:
    return synthetic.references(split, language)


def test_the_label_names_each_corpus_read_beyond_the_dataset_with_its_tag_and_weight(tmp_path):
    other = {"files": ["extra/web.de.gz", "extra/web.en.gz"], "weight": 2.5}
    config = tiny_config(tmp_path, "mix", data={"train_corpora": [BT, other]}, train={"max_steps": 6000})
    words = results_table.recipe(load_config(config))[1]
    assert words == ("Transformer + back-translation (tagged `<bt>`) + 1 more corpus (`web.de`, `web.en`, weight 2.5), "
                     "6,000 updates")
    assert results_table.recipe(load_config(tiny_config(tmp_path, "plain")))[1] == "Transformer, 30 updates"
    results = tmp_path / "results"
    archive_folder(results, "mix", config)
    readme = results_table.tables(results)
    assert "| Transformer + back-translation (tagged `<bt>`) + 1 more corpus" in readme
    assert "(docs/training.md#more-data-through-the-model-the-recipe)" in readme
    assert "the-recipe" not in results_table.tables(_synthetic(tmp_path / "plain", {"tiny": "de-en"}))


def test_each_recipe_model_is_paired_with_the_baseline_of_its_own_seed(recipe_results):
    records, stale = results_table.bootstraps(recipe_results, _refs)
    assert stale == [] and sorted(records) == ["rec_seed1", "rec_seed2"]
    same, better = records["rec_seed1"], records["rec_seed2"]
    assert (same["baseline"], better["baseline"]) == tuple(f"{results_table.BASELINE}_seed{n}" for n in (1, 2))
    for split in archive.SPLITS:
        for metric in ("bleu", "chrf"):
            assert same["splits"][split][metric]["model"]["p_value"] == 1.0  # the same translations: no evidence
            assert better["splits"][split][metric]["model"]["p_value"] < 0.05
    table = results_table.recipe_table(recipe_results, records)
    row = next(line for line in table.splitlines() if "`rec`" in line)
    assert "Transformer + back-translation (tagged `<bt>`)" in row and "| 2 seeds (1, 2) |" in row
    assert row.count("1/2 better*") == 2 * len(archive.SPLITS) and "worse" not in row
    baseline = next(line for line in table.splitlines() if f"`{results_table.BASELINE}`" in line)
    assert baseline.startswith("| Baseline: ") and "(" not in baseline.split("|", 3)[3]  # no verdict of its own


def test_a_single_recipe_model_shows_its_p_value_and_only_a_real_difference_is_starred(recipe_results):
    shutil.rmtree(recipe_results / "rec_seed2")
    records, _ = results_table.bootstraps(recipe_results, _refs)
    row = next(line for line in results_table.recipe_table(recipe_results, records).splitlines() if "`rec`" in line)
    assert "| seed 1 |" in row and row.count("(+0.00, p 1.000)") == 2 * len(archive.SPLITS) and "*" not in row


def test_the_recipe_block_is_written_between_its_markers_and_check_notices_stale_bootstraps(recipe_results, tmp_path,
                                                                                            capsys, monkeypatch):
    monkeypatch.setattr(results_table, "references", lambda _root, split, language: _refs(split, language))
    readme, details = _marked(tmp_path)
    argv = ["--results", str(recipe_results), "--readme", str(readme), "--details", str(details)]
    assert results_table.main(argv) == 0 and results_table.main([*argv, "--check"]) == 0
    block = details.read_text().split(results_table.RECIPE_START)[1].split(results_table.RECIPE_END)[0]
    assert "`rec`" in block and "1,000 resamples, seed 12345" in block
    assert json.loads((recipe_results / "rec_seed2" / "bootstrap.json").read_text())["resamples"] == 1000
    capsys.readouterr()
    (recipe_results / "rec_seed1" / "test2017.hyp.en").write_text(
        "".join(line + "\n" for line in _worse("test2017")), encoding="utf-8")  # its report no longer matches
    written = {p: p.read_bytes() for p in (details, recipe_results / "rec_seed1" / "bootstrap.json")}
    assert results_table.main([*argv, "--check"]) == 1
    assert "rec_seed1/bootstrap.json: missing or not current" in capsys.readouterr().err
    assert all(p.read_bytes() == content for p, content in written.items())
    assert results_table.main(argv) == 0 and results_table.main([*argv, "--check"]) == 0  # recomputed and current
    text = details.read_text()
    details.write_text(text.replace("1/2 better*", "2/2 better*", 1))
    capsys.readouterr()
    assert results_table.main([*argv, "--check"]) == 1
    assert "recipe table: stale" in capsys.readouterr().err


def test_check_recomputes_a_recipe_bootstrap_and_finds_an_edited_figure(recipe_results, tmp_path):
    records, _ = results_table.bootstraps(recipe_results, _refs)
    results_table.write_bootstraps(recipe_results, records)
    root = tmp_path / "root"
    (root / "results").mkdir(parents=True)
    shutil.move(recipe_results, root / "results" / "multi30k")
    assert check.recipe_bootstrap(root, _refs) == []
    path = root / "results" / "multi30k" / "rec_seed1" / "bootstrap.json"
    record = json.loads(path.read_text())
    record["splits"]["test"]["bleu"]["model"]["p_value"] = 0.04
    path.write_text(json.dumps(record))
    problems = check.recipe_bootstrap(root, _refs)
    assert len(problems) == 1 and problems[0].startswith(f"{path}: differs from the paired bootstrap recomputed")


def test_a_details_file_without_the_recipe_markers_is_refused_before_anything_is_written(recipe_results, tmp_path,
                                                                                         capsys):
    readme, details = tmp_path / "README.md", tmp_path / "training.md"
    readme.write_text(f"{results_table.START}\nold\n{results_table.END}\n")
    details.write_text(f"{results_table.DIRECTIONS_START}\n{results_table.DIRECTIONS_END}\n"
                       f"{results_table.DETAILS_START}\nold\n{results_table.DETAILS_END}\n")
    fails_cleanly(results_table.main, ["--results", str(recipe_results), "--readme", str(readme), "--details",
                                       str(details)], capsys, tmp_path, f"{details}: no {results_table.RECIPE_START}")


# ---------------------------------------------------------------------------------------------- validation table


def _validated(folder: Path, last: int) -> None:
    """Validation records every 500 updates up to `last`: BLEU a hundredth of the update, loss falling."""
    records = [{"type": "valid", "step": step, "epoch": 0, "loss": 3000 / step, "bleu": step / 100}
               for step in range(500, last + 1, 500)]
    RunDir(folder).metrics.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_the_validation_table_sets_each_recipe_run_side_by_side_at_equal_updates(recipe_results, tmp_path, capsys):
    _validated(recipe_results / "rec_seed1", 6000)
    _validated(recipe_results / "rec_seed2", 4000)  # stopped before the window's end: no mean
    table = val_table.table(recipe_results)
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in table.splitlines() if line.startswith("| `")}
    assert sorted(rows) == ["`rec_seed1`", "`rec_seed2`"]  # the baseline's seeds read no other corpus
    low, high = val_table.WINDOW
    window = range(low, high + 1, 500)
    assert rows["`rec_seed1`"] == ["back-translation (tagged `<bt>`)", "1",
                                   *(f"{s / 100:.2f}" for s in val_table.SHOWN),
                                   f"{sum(s / 100 for s in window) / len(window):.2f}",
                                   f"{sum(3000 / s for s in window) / len(window):.3f}"]
    assert rows["`rec_seed2`"][1:] == ["2", "10.00", "20.00", "30.00", "40.00", "–", "–", "–", "–"]
    details = tmp_path / "training.md"
    details.write_text(f"text\n{val_table.START}\n{val_table.END}\n")
    argv = ["--results", str(recipe_results), "--details", str(details)]
    assert val_table.main(argv) == 0 and val_table.main([*argv, "--check"]) == 0
    details.write_text(details.read_text().replace("40.00", "41.00", 1))
    capsys.readouterr()
    assert val_table.main([*argv, "--check"]) == 1 and "validation table: stale" in capsys.readouterr().err
    RunDir(recipe_results / "rec_seed2").metrics.write_text("", encoding="utf-8")
    fails_cleanly(val_table.main, argv, capsys, tmp_path, "rec_seed2/metrics.jsonl: no validation record")
