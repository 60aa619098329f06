"""A small results tree laid out as `python -m tools.archive` writes results/multi30k/: translations and
references made up here (English, or German for an English→German config), scored by sacrebleu itself and written
with the archive's own writers, so that the tests of the tables and of `make check` need no committed run (those may
change or go with every new archive)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import sacrebleu

from benchmarks.common import command_line
from nmt.config import load_config
from nmt.evaluation import write_report
from nmt.fileio import write_json
from nmt.run.folder import RunDir
from tools import archive

SENTENCES = 40  # per test set: not the 80 of the sample corpus, nor Multi30k's 1,000
# Per language: who (the sentence's second word), where, and the sentence.
WORDS = {"en": (("dog", "cat", "child", "woman", "man", "bird", "horse"),
                ("grass", "street", "beach", "snow", "stage"), "A {who} runs across the {where} near house {number} ."),
         "de": (("Hund", "Kater", "Junge", "Mann", "Vogel", "Esel", "Bär"),
                ("Wiese", "Straße", "Brücke", "Bühne", "Düne"), "Ein {who} läuft über die {where} bei Haus {number} .")}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def references(split: str, language: str = "en") -> list[str]:
    """The references of one made-up test set in `language` (en, de): every set has its own sentences."""
    shift = archive.SPLITS.index(split) if split in archive.SPLITS else len(split)
    who, where, sentence = WORDS[language]
    return [sentence.format(who=who[(i + shift) % len(who)], where=where[(i * (shift + 1)) % len(where)],
                            number=i + 10 * shift) for i in range(SENTENCES)]


def translations(split: str, language: str = "en") -> list[str]:
    """A made-up system's translations of a test set: most sentences right, some missing a word or wrong."""
    who = WORDS[language][0]
    hyps = []
    for i, ref in enumerate(references(split, language)):
        words = ref.split()
        if i % 3 == 0:
            words = words[:-2] + words[-1:]  # the house number left out
        if i % 5 == 1:
            words[1] = who[(who.index(words[1]) + 1) % len(who)]
        hyps.append(" ".join(words))
    return hyps


def sacrebleu_scores(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """BLEU, BLEU-lc, chrF and TER as sacrebleu gives them (rounded to two decimals, as reports keep them)."""
    scores: dict[str, Any] = {}
    for key, metric in {"bleu": sacrebleu.metrics.BLEU(), "bleu_lc": sacrebleu.metrics.BLEU(lowercase=True),
                        "chrf": sacrebleu.metrics.CHRF(), "ter": sacrebleu.metrics.TER()}.items():
        scores[key] = round(metric.corpus_score(hyps, [refs]).score, 2)
        scores[f"{key}_signature"] = str(metric.get_signature())
    return scores


def archive_folder(results: Path, name: str, config: Path, *, splits: tuple[str, ...] = archive.SPLITS) -> Path:
    """results/`name`/ as the archive writes it: a report and translations per test set in the config's target
    language, run.json, the config and the metrics log."""
    folder = results / name
    folder.mkdir(parents=True)
    checkpoint = f"runs/{name}/checkpoints/best.pt"
    sha256 = hashlib.sha256(name.encode()).hexdigest()  # stands for the checkpoint's
    decode = {"beam": 5, "length_penalty": 1.0}
    language = load_config(config).data.languages[1]
    for split in splits:
        hyps = translations(split, language)
        report = {"split": split, "sentences": len(hyps), "scores": sacrebleu_scores(hyps, references(split, language)),
                  "decode": decode, "members": [{"path": checkpoint, "sha256": sha256, "steps": 300}],
                  "command": f"nmt-evaluate runs/{name} --split {split} --beam 5 --length-penalty 1.0"}
        write_report(report, hyps, RunDir(folder).report(split), RunDir(folder).hypotheses(split, language))
    records = [{"type": "train", "step": 300, "epoch": 2, "loss": 3.0, "elapsed": 600.0}]
    RunDir(folder).metrics.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (folder / RunDir.CONFIG).write_text(config.read_text(encoding="utf-8"), encoding="utf-8")
    argv = ["run", f"runs/{name}", "--beside", "nothing"]
    write_json(folder / "run.json", {
        "name": name, "group": archive.group_of(name), "kind": "run", "training_command": f"nmt-train {config.name}",
        "checkpoint": checkpoint, "sha256": sha256, "seed": 1, "updates": 300, "epochs": 2.0,
        "training_minutes": 10.0, "threads": 1, "decode": decode, "commit": COMMIT, "hardware": "2-core CPU",
        "beside": "nothing", "date": "2026-01-01T00:00:00+00:00",
        "archived_by": command_line(archive.MODULE, argv)})
    return folder
