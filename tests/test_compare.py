"""Comparing runs: significance, attention diagnostics, failed runs, the report files, translation-time checks."""

from __future__ import annotations

import importlib
import json
import math
import shutil

import pytest
import torch
from matplotlib.image import imread

from nmt.cli import compare_main, train_main, translate_main
from nmt.compare import FAILED_NOTE, ComparedRun, compare, paired_bootstrap, pick_baselines, significance
from nmt.config import load_config
from nmt.diagnostics import Thresholds, attention_stats, flags, row_entropy, summarize
from nmt.errors import ConfigError
from tests.conftest import REPO, tiny_config

WORDS = "a man a woman two dogs play in the park near the old red house with green doors".split()


def references(count: int = 60) -> list[str]:
    """Distinct, deterministic English-like sentences."""
    return [" ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6 + i % 5)) + f" {i} ." for i in range(count)]


def test_identical_systems_give_p_one() -> None:
    refs = references()
    hyps = [" ".join(r.split()[:-2]) for r in refs]  # imperfect but shared by both systems
    result, signatures = paired_bootstrap([("base", hyps), ("same", list(hyps))], refs, resamples=1000)
    for metric in ("bleu", "chrf"):
        assert result["base"][metric]["p_value"] is None
        assert result["same"][metric]["p_value"] == pytest.approx(1.0)
        assert result["same"][metric]["score"] == result["base"][metric]["score"]
        assert "bs:1000" in signatures[metric] and "seed:" in signatures[metric]


def test_nearly_identical_systems_are_not_significant() -> None:
    refs = references()
    hyps = [" ".join(r.split()[:-2]) for r in refs]
    other = hyps[:-1] + [refs[-1]]  # one sentence differs
    result, _ = paired_bootstrap([("base", hyps), ("other", other)], refs)
    assert all(result["other"][m]["p_value"] > 0.05 for m in ("bleu", "chrf"))


def test_clearly_better_system_is_significant() -> None:
    refs = references()
    weak = [" ".join(reversed(r.split()[:3])) for r in refs]
    strong = [r.replace(" the ", " a ", 1) for r in refs]
    result, _ = paired_bootstrap([("weak", weak), ("strong", strong)], refs)
    for metric in ("bleu", "chrf"):
        stats = result["strong"][metric]
        assert stats["p_value"] < 0.05
        assert stats["score"] > result["weak"][metric]["score"]
        low, high = stats["ci95"]
        assert low <= stats["mean"] <= high and high < 100.0 + 1e-9


@pytest.mark.parametrize("n", [2, 5, 17])
def test_entropy_of_uniform_and_one_hot_rows(n: int) -> None:
    uniform = torch.full((n,), 1.0 / n)  # (S,)
    one_hot = torch.zeros(n).index_fill_(0, torch.tensor([n // 2]), 1.0)  # (S,)
    assert float(row_entropy(uniform)) == pytest.approx(math.log(n))
    assert float(row_entropy(one_hot)) == pytest.approx(0.0, abs=1e-12)


def test_attention_stats_count_focused_and_uniform_rows() -> None:
    n = 6
    weights = torch.stack([torch.full((n,), 1.0 / n), torch.eye(n)[2], torch.eye(n)[4],
                           torch.tensor([0.5, 0.5, 0, 0, 0, 0])])  # (T=4, S=6)
    stats = attention_stats(weights, per_row=True)
    assert stats["focused_share"] == pytest.approx(0.5)
    assert stats["uniform_share"] == pytest.approx(0.25)
    assert stats["row_entropy"] == pytest.approx([math.log(n), 0.0, 0.0, math.log(2)], abs=1e-4)
    assert stats["row_max_weight"] == pytest.approx([1 / n, 1.0, 1.0, 0.5], abs=1e-4)
    assert flags(stats) == []
    assert flags(stats, Thresholds(max_uniform_share=0.2, max_focused_share=0.4)) == ["near-uniform", "over-focused"]
    total = summarize([stats, attention_stats(torch.eye(n)[:3])])
    assert total["rows"] == 7 and total["focused_share"] == pytest.approx(5 / 7, abs=1e-4)
    assert total["flagged_share"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="focused"):
        Thresholds(focused=1.5)


@pytest.fixture(scope="module")
def gru_run(tmp_path_factory):
    """A second tiny real run (GRU, dot attention) with validation BLEU in its metrics (greedy, at a fixed
    length penalty: its test report is all the comparison needs)."""
    folder = tmp_path_factory.mktemp("gru")
    cfg = tiny_config(folder, name="gru_dot", arch="rnn", model={"attention": "dot"},
                      train={"max_steps": 20, "eval_every": 10, "eval_bleu": True},
                      decode={"beam": 1, "length_penalty": 1.0})
    assert train_main([str(cfg)]) == 0
    return folder / "runs" / "gru_dot"


def test_compare_writes_report_from_real_runs(trained_run, gru_run, tmp_path, capsys):
    out = tmp_path / "report"
    assert compare_main([str(trained_run), str(gru_run), "--out", str(out), "--suite", "tiny",
                         "--baseline", "gru_dot", "--diag-sentences", "20", "--heatmaps", "1"]) == 0
    data = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    assert data["baselines"] == {"transformer": "shared", "rnn": "gru_dot"} and data["test_sentences"] == 80
    rows = {r["name"]: r for r in data["runs"]}
    assert rows["shared"]["attention"] == "transformer/full" and rows["gru_dot"]["attention"] == "rnn/dot"
    for row in rows.values():
        assert row["status"] == "ok"
        assert row["parameters"] > 0 and row["train_tgt_tok_s"] > 0 and row["decode_sentences_per_s"] > 0
    assert set(data["significance"]["runs"]) == {"shared", "gru_dot"}
    for name in ("shared", "gru_dot"):  # each is its family's only run, so its own baseline
        assert data["significance"]["runs"][name]["baseline"] == name
        assert data["significance"]["runs"][name]["bleu"]["p_value"] is None
    for diag in data["diagnostics"].values():
        assert diag["sentences"] == 20 and 0.0 <= diag["mean_entropy"] <= diag["mean_uniform_entropy"] + 1e-6
    assert data["learning_curve_metric"] == "validation loss"  # the shared run logs no validation BLEU
    pngs = [out / data["plots"]["learning_curves"]] + [out / name for name in data["plots"]["attention"]]
    assert len(pngs) == 2  # one heatmap: a tiny run's outputs reach the length cap, and each grid takes a second
    for png in pngs:
        height, width = imread(png).shape[:2]
        assert height > 200 and width > 400
    report = (out / "compare.md").read_text(encoding="utf-8")
    assert "| shared | transformer/full | ok |" in report and "learning_curves.png" in report
    assert "Baselines for significance: shared for transformer, gru_dot for rnn." in capsys.readouterr().out


def test_copies_without_checkpoints_compare_as_their_runs_do(trained_run, gru_run, tmp_path):
    """A comparison assembled from copied run files (no checkpoints, the attention record beside them) gives the
    scores, significance, diagnostics and heatmaps of the comparison of the runs themselves; a copy whose record
    was made with other settings says it has no checkpoint instead."""
    from nmt.compare import ATTENTION_RECORD, attention_record, load_run, run_files, test_sources

    settings = ["--diag-sentences", "20", "--heatmaps", "1", "--suite", "tiny"]
    assert compare_main([str(trained_run), str(gru_run), "--out", str(tmp_path / "runs_report"), *settings]) == 0
    copies = []
    for run in (trained_run, gru_run):
        copy = tmp_path / "copies" / run.name
        copy.mkdir(parents=True)
        for name in run_files(run):
            if (run / name).exists():
                shutil.copyfile(run / name, copy / name)
        loaded = load_run(run)
        record = attention_record(loaded, test_sources(loaded.cfg), torch.device("cpu"), 20, 1, Thresholds())
        (copy / ATTENTION_RECORD).write_text(json.dumps(record), encoding="utf-8")
        copies.append(copy)
    assert compare_main([*map(str, copies), "--out", str(tmp_path / "copies_report"), *settings]) == 0
    first, second = (json.loads((tmp_path / f"{kind}_report" / "compare.json").read_text()) for kind in ("runs",
                                                                                                          "copies"))
    for key in ("significance", "diagnostics", "plots", "baselines"):
        assert first[key] == second[key], key
    assert [{k: v for k, v in r.items() if k != "path"} for r in first["runs"]] == \
           [{k: v for k, v in r.items() if k != "path"} for r in second["runs"]]
    for name in first["plots"]["attention"]:
        assert (imread(tmp_path / "runs_report" / name) == imread(tmp_path / "copies_report" / name)).all()
    assert compare_main([*map(str, copies), "--out", str(tmp_path / "other"), "--diag-sentences", "10"]) == 0
    diagnostics = json.loads((tmp_path / "other" / "compare.json").read_text())["diagnostics"]
    assert all("no checkpoint" in d["error"] for d in diagnostics.values())


def test_further_test_sets_are_bootstrapped_against_the_same_baselines(monkeypatch):
    """Each test set every run was decoded on gets its own paired bootstrap, against each family's baseline;
    a set one run lacks is left out."""
    import nmt.compare as comparison

    runs = [ComparedRun(p.stem, p, cfg=load_config(p))
            for p in sorted((REPO / "configs/compare/multi30k").glob("*.yaml")) if "gru" in p.stem]
    refs = {"test2017": [f"a dog runs on the grass number {i} ." for i in range(30)],
            "test2018": [f"two men sit on a bench number {i} ." for i in range(30)]}
    for number, run in enumerate(runs):
        run.tests = {split: ({}, [ref if (i + number) % 3 else "a cat ." for i, ref in enumerate(lines)])
                     for split, lines in refs.items()}
    del runs[0].tests["test2018"]
    monkeypatch.setattr(comparison, "split_pair", lambda cfg, split: (refs[split], refs[split]))
    baselines, _ = pick_baselines(runs, [])
    further = comparison.further_significance(runs, baselines, resamples=50)
    assert list(further) == ["test2017"]
    result = further["test2017"]["runs"]
    assert {name: r["baseline"] for name, r in result.items()} == {r.name: "cmp_multi30k_gru_additive" for r in runs}
    for run in runs:
        expected = paired_bootstrap([("base", baselines["rnn"].tests["test2017"][1]),
                                     ("run", run.tests["test2017"][1])], refs["test2017"], 50)[0]["run"]["bleu"]
        assert result[run.name]["bleu"]["score"] == expected["score"]


def test_failed_and_missing_runs_are_listed(trained_run, tmp_path):
    same = tmp_path / "same"
    shutil.copytree(trained_run, same)
    failed = tmp_path / "crashed"
    failed.mkdir()
    (failed / FAILED_NOTE).write_text("nmt-train exited with status 1: error: boom\n", encoding="utf-8")
    truncated = tmp_path / "truncated"
    shutil.copytree(trained_run, truncated)
    hyps = truncated / "test.hyp.en"
    hyps.write_text("".join(hyps.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")
    no_model = tmp_path / "no_model"
    shutil.copytree(trained_run, no_model)
    shutil.rmtree(no_model / "checkpoints")
    data = compare([trained_run, same, tmp_path / "missing", failed, truncated, no_model], tmp_path / "out", "t",
                   diag_sentences=5, heatmaps=1, resamples=200)
    rows = {r["name"]: r for r in data["runs"]}
    assert [r["name"] for r in data["runs"]] == ["shared", "same", "missing", "crashed", "truncated", "no_model"]
    assert rows["no_model"]["status"] == "ok" and "no checkpoint" in data["diagnostics"]["no_model"]["error"]
    assert rows["missing"]["status"] == "failed" and "not found" in rows["missing"]["reason"]
    assert rows["crashed"]["status"] == "failed" and "boom" in rows["crashed"]["reason"]
    assert rows["truncated"]["status"] == "failed" and "79 lines" in rows["truncated"]["reason"]
    assert set(data["significance"]["runs"]) == {"shared", "same", "no_model"}
    assert data["significance"]["runs"]["same"]["bleu"]["p_value"] == 1.0
    assert data["significance"]["runs"]["same"]["baseline"] == "shared"
    report = (tmp_path / "out" / "compare.md").read_text(encoding="utf-8")
    assert "| crashed | – | **failed**: nmt-train exited with status 1: error: boom |" in report


def test_compare_rejects_unknown_baseline(trained_run, tmp_path, capsys):
    assert compare_main([str(trained_run), "--baseline", "nope", "--out", str(tmp_path)]) == 1
    assert "--baseline nope" in capsys.readouterr().err


def test_translate_attention_stats_with_thresholds(trained_run, tmp_path, capsys):
    src = tmp_path / "in.de"
    src.write_text("Ein Hund läuft im Park.\n\nZwei Kinder spielen mit einem Ball.\n", encoding="utf-8")
    stats = tmp_path / "stats.jsonl"
    args = ["-c", str(trained_run), "-i", str(src), "-o", str(tmp_path / "out.en"), "--attention-stats", str(stats)]
    assert translate_main(args + ["--uniform-threshold", "0", "--focus-threshold", "0.05"]) == 0
    records = [json.loads(line) for line in stats.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in records] == [1, 3]
    for record in records:
        assert len(record["row_entropy"]) == len(record["row_max_weight"]) == record["rows"]
        assert all(0.0 < w <= 1.0 for w in record["row_max_weight"])
        assert record["uniform_share"] == 1.0 and "near-uniform" in record["flags"]
        assert record["focused_share"] == 1.0 and ("over-focused" in record["flags"]) == (record["rows"] > 2)
    assert translate_main(args) == 0
    assert all(isinstance(json.loads(line)["flags"], list) for line in stats.read_text(encoding="utf-8").splitlines())
    assert translate_main(args + ["--focus-threshold", "1.5"]) == 2
    assert "--focus-threshold: got '1.5', allowed: a number in [0, 1]" in capsys.readouterr().err


def test_suite_budget_overrides():
    suite = importlib.import_module("benchmarks.compare_suite")
    assert suite.budget_overrides("20m") == ["--set", "train.max_minutes=20", "--set", "train.max_steps=0"]
    assert suite.budget_overrides("1.5h") == ["--set", "train.max_minutes=90", "--set", "train.max_steps=0"]
    assert suite.budget_overrides("3000") == ["--set", "train.max_steps=3000", "--set", "train.max_minutes=0"]
    with pytest.raises(ValueError, match="20m"):
        suite.budget_overrides("fast")
    assert suite.main(["sample", "--set", "train.threads"]) == 2  # refused before anything is trained
    names = [p.stem for p in suite.suite_configs("sample")]
    assert names == [f"cmp_sample_gru_{a}" for a in ("none", "dot", "general", "additive")] + \
                    [f"cmp_sample_transformer_{a}" for a in ("full", "local", "sparse", "linear")]


def test_each_family_is_tested_against_its_own_baseline():
    runs = [ComparedRun(p.stem, p, cfg=load_config(p))
            for p in sorted((REPO / "configs/compare/multi30k").glob("*.yaml"))]
    defaults, notes = pick_baselines(runs, [])
    assert {fam: run.name for fam, run in defaults.items()} == {
        "rnn": "cmp_multi30k_gru_additive", "transformer": "cmp_multi30k_transformer_full"} and notes == []
    chosen, _ = pick_baselines(runs, ["cmp_multi30k_gru_none"])
    assert chosen["rnn"].name == "cmp_multi30k_gru_none" and chosen["transformer"].name.endswith("full")
    with pytest.raises(ConfigError, match="one baseline per family"):
        pick_baselines(runs, ["cmp_multi30k_gru_none", "cmp_multi30k_gru_dot"])
    refs = [f"a dog runs on the grass number {i} ." for i in range(30)]
    for number, run in enumerate(runs):
        run.hyps = [ref if (i + number) % 3 else "a cat ." for i, ref in enumerate(refs)]
    result = significance(runs, defaults, refs, resamples=50)["runs"]
    assert list(result) == [run.name for run in runs]
    for run in runs:
        expected = defaults["rnn" if "gru" in run.name else "transformer"].name
        assert result[run.name]["baseline"] == expected
        assert (result[run.name]["bleu"]["p_value"] is None) == (run.name == expected)


@pytest.mark.parametrize("systems,refs", [
    ([("base", ["", ""]), ("other", ["x", "y"])], ["a b c d", "e f g h"]),  # both score 0 whatever is resampled
    ([("base", ["a b c d"]), ("other", ["a b c x"])], ["a b c d"]),  # one sentence: every resample is the same
])
def test_no_significance_without_variation(systems, refs) -> None:
    result, _ = paired_bootstrap(systems, refs, resamples=200)
    assert all(result["other"][m]["p_value"] == 1.0 for m in ("bleu", "chrf"))


def test_hand_edited_and_cut_off_run_files(tmp_path, trained_run, capsys) -> None:
    """A run whose report is not one nmt-evaluate writes fails with a reason naming the file; a metrics line
    cut off by a crash, or one with odd figures, is left out; a comparison with no usable run exits 1."""
    from nmt.compare import finite_metrics, load_run
    from nmt.run.folder import read_metrics

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"type": "train", "step": 5, "tgt_tok_s": "fast", "loss": 2.5}\n[1]\n'
                       '{"type": "valid", "step": 5, "loss": NaN}\n{"type": "train", "step": 10, "lo', encoding="utf-8")
    assert finite_metrics(metrics) == [{"type": "train", "step": 5, "loss": 2.5}, {"type": "valid", "step": 5}]
    assert read_metrics(metrics).skipped == [2, 4]  # the one reader names the lines it left out
    for report in ("[1, 2]", '{"sentences": 80}', '{"scores": {"bleu": "high", "chrf": 1, "ter": 1}, "sentences": 80}',
                   ""):
        run = tmp_path / "run"
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(trained_run, run)
        (run / "eval_test.json").write_text(report, encoding="utf-8")
        loaded = load_run(run)
        assert loaded.status == "failed" and "eval_test.json" in loaded.reason, loaded.reason
    assert compare_main([str(run), "--out", str(tmp_path / "out"), "--heatmaps", "0"]) == 1
    assert "no run could be compared" in capsys.readouterr().err


def test_plot_titles_are_plain_text(tmp_path) -> None:
    from nmt.plots import attention_heatmap

    path = tmp_path / "h.png"
    attention_heatmap(torch.full((3, 3), 1 / 3).numpy(), ["Preis:", "$x^{2$", "$_$"], ["a", "$", "b"], path,
                      title="Preis: $x^{2$ oder $_$ mehr.")
    assert imread(path).shape[2] in (3, 4)


def test_suite_names_and_budgets_that_could_delete_or_escape_are_refused() -> None:
    suite = importlib.import_module("benchmarks.compare_suite")
    for name in ("..", "../", "/tmp", "sample/..", "", "nope"):
        with pytest.raises(ValueError, match="not a suite"):
            suite.suite_configs(name)
    for budget in ("0m", "0.0h", "0", "-3m", "12x"):
        with pytest.raises(ValueError, match="use minutes"):
            suite.budget_overrides(budget)
