"""The recipe of docs/training.md as `make recipe` runs it: its stages in order, each making the file the next
reads, by the commands that made the stored corpora and archived runs; its configs naming only files the chain
writes, with multi30k_transformer.yaml's model; data/recipe/ ignored by git."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import nmt
from nmt.config import parse_overrides, to_dict
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
        "-c runs/multi30k_transformer_en_de_seed1 -i data/recipe/task2.en -o data/recipe/task2.bt_greedy.de "
        "--split-sentences off --beam 1",
        "nmt-train configs/recipe/multi30k_recipe_bt_greedy.yaml",
        "--task2 de --output data/recipe/task2.de",
        "-c runs/multi30k_recipe_bt_greedy --split-sentences off -i data/recipe/task2.de "
        "-o data/recipe/task2.ft_greedy.en",
        "--task1 de --output data/recipe/train.de",
        "-c runs/multi30k_recipe_bt_greedy --split-sentences off -i data/recipe/train.de "
        "-o data/recipe/train.distil_greedy.en",
        "--task1 en --output data/recipe/train.en",
        *(f"nmt-train configs/recipe/multi30k_recipe_student_greedy.yaml "
          f"--set name=multi30k_recipe_student_greedy_seed{n} --set train.seed={n}" for n in (1, 2, 3)),
    ]
    assert len(commands) == len(stages), commands
    for command, stage in zip(commands, stages, strict=True):
        assert stage in command, (stage, command)
    assert "--sampling" not in str(commands)


def test_make_recipe_steps_makes_the_sampled_chain_val_compared_it_with():
    steps = dry_run(target="recipe-steps")
    back_translation = next(c for c in steps if "-o data/recipe/task2.bt.de" in c)
    assert back_translation.endswith("--split-sentences off --sampling --beam 1 --seed 1")
    trainings = [c.split()[1] for c in steps if "nmt-train" in c]
    recipe = "configs/recipe/multi30k_recipe"
    assert trainings == ["configs/multi30k_transformer_en_de.yaml", f"{recipe}_bt.yaml", f"{recipe}_bt_ft.yaml",
                         *[f"{recipe}_student.yaml"] * 3]
    assert "greedy" not in str(steps)


def test_the_recipe_takes_the_students_seeds_and_the_training_settings_from_variables():
    trainings = [c for c in dry_run("STUDENT_SEEDS=4 5", "SET=--set train.threads=1") if "nmt-train" in c]
    assert all(c.endswith(" --set train.threads=1") for c in trainings)
    assert [c for c in trainings if "student" in c] == [
        f".venv/bin/nmt-train configs/recipe/multi30k_recipe_student_greedy.yaml "
        f"--set name=multi30k_recipe_student_greedy_seed{n} --set train.seed={n} --set train.threads=1" for n in (4, 5)]


def as_run(command: str) -> str:
    """A dry-run line as a manifest or run.json records it: the program's name without its folder."""
    return command.removeprefix(".venv/bin/")


def trained_by(command: str, threads: int) -> dict:
    """The config an `nmt-train CONFIG --set ...` command trains with `threads` torch threads, as a run stores it
    but with its paths relative to the checkout."""
    words = shlex.split(command)
    overrides = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    return to_dict(nmt.load_config(REPO / words[1], parse_overrides([*overrides, f"train.threads={threads}"])))


def as_stored(config_file: Path) -> dict:
    """An archived run's config.yaml with its absolute paths made relative to the checkout that trained it (the
    folder above its run_root)."""
    cfg = to_dict(nmt.load_config(config_file))
    return json.loads(json.dumps(cfg).replace(f"{Path(cfg['run_root']).parent}/", ""))


def test_the_stored_corpora_and_archived_runs_were_made_by_the_chains_own_commands():
    commands = [as_run(c) for c in dry_run() + dry_run(target="recipe-steps")]
    translations = {re.search(r" -o (\S+)", c)[1]: c for c in commands if c.startswith("nmt-translate")}
    stored = {}
    for manifest in (REPO / "results" / "synthetic").glob("*/manifest.json"):
        record = json.loads(manifest.read_text())
        if record["output"]["path"] in translations:
            stored[record["output"]["path"]] = record["command"]
    assert stored == translations  # each corpus the chains translate is stored, by the chain's command

    archived = set()
    for command in (c for c in commands if c.startswith("nmt-train")):
        name = re.search(r"--set name=(\S+)", command) or re.search(r"(\w+)\.yaml", command)
        folder = REPO / "results" / "multi30k" / name[1]
        if (folder / "run.json").exists():
            threads = json.loads((folder / "run.json").read_text())["threads"]
            assert as_stored(folder / "config.yaml") == trained_by(command, threads), folder
            archived.add(name[1])
    # the reverse model and both teachers at least
    assert archived >= {"multi30k_transformer_en_de_seed1", "multi30k_recipe_bt", "multi30k_recipe_bt_greedy"}


def test_the_recipe_configs_read_what_the_chains_write_and_train_the_baselines_model():
    written = {m for c in dry_run() + dry_run(target="recipe-steps") for m in re.findall(r"(?:-o|--output) (\S+)", c)}
    baseline = nmt.load_config(REPO / "configs" / "multi30k_transformer.yaml")
    assert {p.stem for p in CONFIGS} >= {"multi30k_recipe_bt", "multi30k_recipe_bt_ft", "multi30k_recipe_student",
                                         "multi30k_recipe_bt_greedy", "multi30k_recipe_student_greedy"}
    for path in CONFIGS:
        cfg = nmt.load_config(path)
        assert {f for corpus in cfg.data.corpora for f in corpus.files} <= written, path
        assert cfg.model == baseline.model and cfg.tokenizer == baseline.tokenizer, path
        differ = {k for k, v in vars(cfg.train).items() if getattr(baseline.train, k) != v}
        assert differ <= BUDGET, (path, differ)
        if cfg.data.corpora:  # a synthetic-data stage: its budget in updates
            assert cfg.train.max_steps > 0 and cfg.train.max_epochs == 0 and cfg.train.eval_every > 0, path
    for name in ("multi30k_recipe_student", "multi30k_recipe_student_greedy"):
        student = nmt.load_config(REPO / "configs" / "recipe" / f"{name}.yaml")
        assert [c.tag for c in student.data.corpora] == ["", "<bt>", "<ft>", ""]
        assert student.data.corpora[0].files == ["data/recipe/train.de", "data/recipe/train.en"]  # the real pairs
    assert nmt.load_config(REPO / "configs" / "multi30k_transformer_en_de.yaml").data.languages == ("en", "de")


def test_the_recipes_files_are_ignored_and_the_committed_sample_is_not():
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0

    assert ignored("data/recipe/task2.bt.de") and ignored("data/recipe/train.distil.en")
    assert not ignored("data/sample/train.de") and not ignored("data/other.de")
