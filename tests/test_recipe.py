"""The recipe of docs/training.md as `make recipe` runs it: its stages in order, each making the file the next
reads; its configs naming only files the chain writes, with multi30k_transformer.yaml's model; data/recipe/
ignored by git."""

from __future__ import annotations

import re
import subprocess

import nmt
from tests.conftest import REPO

CONFIGS = sorted((REPO / "configs" / "recipe").glob("*.yaml"))
BUDGET = {"max_steps", "max_epochs", "eval_every", "patience"}  # a synthetic-data stage counts updates instead


def dry_run(*args: str) -> list[str]:
    """The commands `make recipe` would run from scratch (-B: as if nothing were made), without running them."""
    done = subprocess.run(["make", "-n", "-B", "recipe", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if re.search(r"nmt-(train|prepare|translate|evaluate) ", line)]


def test_make_recipe_runs_the_stages_in_order_each_after_what_it_reads():
    commands = dry_run()
    stages = [
        "nmt-train configs/multi30k_transformer_en_de.yaml",
        "--task2 en --output data/recipe/task2.en",
        "-c runs/multi30k_transformer_en_de -i data/recipe/task2.en -o data/recipe/task2.bt.de --split-sentences off "
        "--sampling --beam 1 --seed 1",
        "--set name=multi30k_transformer_seed1 --set train.seed=1",
        "--set name=multi30k_transformer_seed2 --set train.seed=2",
        "--set name=multi30k_transformer_seed3 --set train.seed=3",
        "nmt-evaluate runs/multi30k_transformer_seed1 -c runs/multi30k_transformer_seed2 -c "
        "runs/multi30k_transformer_seed3 --split val",
        "--task2 de --output data/recipe/task2.de",
        "-i data/recipe/task2.de -o data/recipe/task2.ft.en",
        "--task1 de --output data/recipe/train.de",
        "-i data/recipe/train.de -o data/recipe/train.distil.en",
        "--task1 en --output data/recipe/train.en",
        "nmt-train configs/recipe/multi30k_recipe_student.yaml",
    ]
    assert len(commands) == len(stages), commands
    for command, stage in zip(commands, stages, strict=True):
        assert stage in command, (stage, command)
    ensemble = " ".join(f"-c runs/multi30k_transformer_seed{n}" for n in (1, 2, 3))
    assert all(ensemble in c and "--split-sentences off" in c and "--beam" not in c and
               "ensemble_length_penalty.json" in c for c in commands[8:11:2])  # the penalty the ensemble chose


def test_the_recipe_takes_its_seeds_and_training_settings_from_variables():
    commands = dry_run("RECIPE_SEEDS=4 5", "SET=--set train.threads=1")
    assert [c for c in commands if "seed" in c and "nmt-train" in c] == [
        f".venv/bin/nmt-train configs/multi30k_transformer.yaml --set name=multi30k_transformer_seed{n} "
        f"--set train.seed={n} --set train.threads=1" for n in (4, 5)]
    assert all(c.endswith("--set train.threads=1") for c in commands if "nmt-train" in c)
    assert "-c runs/multi30k_transformer_seed4 -c runs/multi30k_transformer_seed5 --split" in commands[-3]


def test_the_recipe_configs_read_what_the_chain_writes_and_train_the_baselines_model():
    written = {m for c in dry_run() for m in re.findall(r"(?:-o|--output) (\S+)", c)}
    baseline = nmt.load_config(REPO / "configs" / "multi30k_transformer.yaml")
    assert {p.stem for p in CONFIGS} >= {"multi30k_recipe_bt", "multi30k_recipe_bt_ft", "multi30k_recipe_student"}
    for path in CONFIGS:
        cfg = nmt.load_config(path)
        assert {f for corpus in cfg.data.corpora for f in corpus.files} <= written, path
        assert cfg.model == baseline.model and cfg.tokenizer == baseline.tokenizer, path
        differ = {k for k, v in vars(cfg.train).items() if getattr(baseline.train, k) != v}
        assert differ <= BUDGET, (path, differ)
        if cfg.data.corpora:  # a synthetic-data stage: its budget in updates
            assert (cfg.train.max_steps, cfg.train.max_epochs) == (6000, 0) and cfg.train.eval_every > 0, path
    student = nmt.load_config(REPO / "configs" / "recipe" / "multi30k_recipe_student.yaml")
    assert [c.tag for c in student.data.corpora] == ["", "<bt>", "<ft>", ""]
    assert student.data.corpora[0].files == ["data/recipe/train.de", "data/recipe/train.en"]  # the real pairs again
    assert nmt.load_config(REPO / "configs" / "multi30k_transformer_en_de.yaml").data.languages == ("en", "de")


def test_the_recipes_files_are_ignored_and_the_committed_sample_is_not():
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0

    assert ignored("data/recipe/task2.bt.de") and ignored("data/recipe/train.distil.en")
    assert not ignored("data/sample/train.de") and not ignored("data/other.de")
