"""The recipe of docs/training.md as `make recipe` runs it: its stages in order, each making the file the next
reads, by the commands that made the stored corpora and archived runs; its configs naming only files the chain
writes, with multi30k_transformer.yaml's model; data/recipe/ ignored by git."""

from __future__ import annotations

import json
import re
import subprocess

import nmt
from tests.conftest import REPO

CONFIGS = sorted((REPO / "configs" / "recipe").glob("*.yaml"))
BUDGET = {"max_steps", "max_epochs", "eval_every", "patience"}  # a synthetic-data stage counts updates instead


def dry_run(*args: str, target: str = "recipe") -> list[str]:
    """The commands `make TARGET` would run from scratch (-B: as if nothing were made), without running them."""
    done = subprocess.run(["make", "-n", "-B", target, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines() if re.search(r"nmt-(train|prepare|translate) ", line)]


def test_make_recipe_runs_the_stages_in_order_each_after_what_it_reads():
    commands = dry_run()
    stages = [
        "nmt-train configs/multi30k_transformer_en_de.yaml --set name=multi30k_transformer_en_de_seed1",
        "--task2 en --output data/recipe/task2.en",
        "-c runs/multi30k_transformer_en_de_seed1 -i data/recipe/task2.en -o data/recipe/task2.bt.de "
        "--split-sentences off --sampling --beam 1 --seed 1",
        "nmt-train configs/recipe/multi30k_recipe_bt.yaml",
        "--task2 de --output data/recipe/task2.de",
        "-c runs/multi30k_recipe_bt --split-sentences off -i data/recipe/task2.de -o data/recipe/task2.ft.en",
        "--task1 de --output data/recipe/train.de",
        "-c runs/multi30k_recipe_bt --split-sentences off -i data/recipe/train.de -o data/recipe/train.distil.en",
        "--task1 en --output data/recipe/train.en",
        *(f"nmt-train configs/recipe/multi30k_recipe_student.yaml --set name=multi30k_recipe_student_seed{n} "
          f"--set train.seed={n}" for n in (1, 2, 3)),
    ]
    assert len(commands) == len(stages), commands
    for command, stage in zip(commands, stages, strict=True):
        assert stage in command, (stage, command)
    steps = dry_run(target="recipe-steps")
    assert steps[-1].endswith("nmt-train configs/recipe/multi30k_recipe_bt_ft.yaml") and "student" not in str(steps)


def test_the_recipe_takes_the_students_seeds_and_the_training_settings_from_variables():
    trainings = [c for c in dry_run("STUDENT_SEEDS=4 5", "SET=--set train.threads=1") if "nmt-train" in c]
    assert all(c.endswith(" --set train.threads=1") for c in trainings)
    assert [c for c in trainings if "student" in c] == [
        f".venv/bin/nmt-train configs/recipe/multi30k_recipe_student.yaml --set name=multi30k_recipe_student_seed{n} "
        f"--set train.seed={n} --set train.threads=1" for n in (4, 5)]


def as_run(command: str) -> str:
    """A dry-run line as a manifest or run.json records it: the program's name without its folder."""
    return command.removeprefix(".venv/bin/")


def test_the_stored_corpora_and_archived_runs_were_made_by_the_chains_own_commands():
    translations = {re.search(r" -o (\S+)", c)[1]: as_run(c) for c in dry_run() if "nmt-translate" in c}
    stored = {}
    for manifest in (REPO / "results" / "synthetic").glob("*/manifest.json"):
        record = json.loads(manifest.read_text())
        if record["output"]["path"] in translations:
            stored[record["output"]["path"]] = record["command"]
    assert stored == translations  # each corpus the chain translates is stored, by the chain's command

    archived = 0
    for command in (as_run(c) for c in dry_run() if "nmt-train" in c):
        name = re.search(r"--set name=(\S+)", command) or re.search(r"(\w+)\.yaml", command)
        run = REPO / "results" / "multi30k" / name[1] / "run.json"
        if run.exists():
            record = json.loads(run.read_text())
            assert record["training_command"] == f"{command} --set train.threads={record['threads']}", run
            archived += 1
    assert archived >= 2  # the reverse model and the teacher at least


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
