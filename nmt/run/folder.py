"""The layout of a run folder, known in one place, and the one reader of its metrics log.

A run folder (run_root/name) holds what `nmt-train` writes and later commands read:

    config.yaml            the resolved config          train.log        the log of every session
    metrics.jsonl          one JSON record per line     tensorboard/     the same figures, when asked for
    tokenizer/             the sentencepiece model(s)   train.lock       held while a training runs
    checkpoints/           last.pt (resumable), best.pt, step_N.pt (the best k), averaged.pt
    eval_<split>.json      an evaluation report         <split>.hyp.<target language>   its translations
    length_penalty.json    the length-penalty tuning    train_failed.txt why a suite's training failed
    curve.png              the learning curve, redrawn at each validation

This module knows names and paths only: it creates, locks and writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class RunDir:
    """The paths of one run folder's files (nothing is created or checked)."""

    CONFIG = "config.yaml"
    LOG = "train.log"
    METRICS = "metrics.jsonl"
    TENSORBOARD = "tensorboard"
    TOKENIZER = "tokenizer"
    LOCK = "train.lock"
    FAILED = "train_failed.txt"
    LENGTH_PENALTY = "length_penalty.json"
    CURVE = "curve.png"
    CHECKPOINTS = "checkpoints"
    LAST, BEST, AVERAGED = "last.pt", "best.pt", "averaged.pt"
    STEPS = "step_*.pt"  # the checkpoints of the best k validations, named by `step`
    FINAL_ORDER = (AVERAGED, BEST, LAST)  # the checkpoint a run folder stands for: the first of these found

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @classmethod
    def of(cls, model: str | Path) -> RunDir:
        """The run folder a model path belongs to: the folder itself, the run of a file in its checkpoints/
        folder, else the folder the file is in."""
        model = Path(model)
        if model.is_dir():
            return cls(model)
        return cls(model.parent.parent if model.parent.name == cls.CHECKPOINTS else model.parent)

    @property
    def name(self) -> str:
        """The run's name (its folder's)."""
        return self.path.name

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def log(self) -> Path:
        return self.path / self.LOG

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def tensorboard(self) -> Path:
        return self.path / self.TENSORBOARD

    @property
    def tokenizer(self) -> Path:
        return self.path / self.TOKENIZER

    @property
    def lock(self) -> Path:
        return self.path / self.LOCK

    @property
    def curve(self) -> Path:
        return self.path / self.CURVE

    @property
    def failed(self) -> Path:
        return self.path / self.FAILED

    @property
    def length_penalty(self) -> Path:
        return self.path / self.LENGTH_PENALTY

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def last(self) -> Path:
        return self.checkpoints / self.LAST

    @property
    def best(self) -> Path:
        return self.checkpoints / self.BEST

    @property
    def averaged(self) -> Path:
        return self.checkpoints / self.AVERAGED

    def checkpoint(self, name: str) -> Path:
        """A file in checkpoints/ by name (as last.pt's list of the best k names them)."""
        return self.checkpoints / name

    def step(self, step: int) -> Path:
        """The checkpoint kept for the validation at `step` while it ranks among the best k."""
        return self.checkpoints / f"step_{step}.pt"

    def finals(self) -> list[Path]:
        """The checkpoints the run folder may stand for, in the order a loader prefers them."""
        return [self.checkpoints / name for name in self.FINAL_ORDER]

    @staticmethod
    def report_name(split: str) -> str:
        """The file name of a split's evaluation report (eval_test.json for the test split)."""
        return f"eval_{split}.json"

    @staticmethod
    def hypotheses_name(split: str, language: str) -> str:
        """The file name of the translations into `language` an evaluation of `split` wrote (test.hyp.en for the
        test split of a model into English)."""
        return f"{split}.hyp.{language}"

    def report(self, split: str) -> Path:
        """The evaluation report of a split."""
        return self.path / self.report_name(split)

    def hypotheses(self, split: str, language: str) -> Path:
        """The translations into `language` an evaluation of `split` wrote."""
        return self.path / self.hypotheses_name(split, language)

    def outputs(self, language: str, tokenizer_files: tuple[str, ...] = ()) -> list[Path]:
        """The files nmt-train writes for a model into `language`, with the tokenizer's files named by
        `tokenizer_files` (nmt.tokenizer's)."""
        return [self.config, self.log, self.metrics, self.report("test"), self.hypotheses("test", language),
                self.length_penalty, self.curve, *(self.tokenizer / name for name in tokenizer_files), self.last,
                self.best, self.averaged]

    def read_metrics(self) -> MetricRecords:
        """The records of this run's metrics.jsonl (see `read_metrics`)."""
        return read_metrics(self.metrics)


class MetricRecords(list):
    """The records of a metrics log, in file order; `skipped` holds the numbers (from 1) of the lines left out."""

    def __init__(self, records: list[dict[str, Any]], skipped: list[int]) -> None:
        super().__init__(records)
        self.skipped = skipped


def read_metrics(path: str | Path) -> MetricRecords:
    """The records of a metrics log: every line that is a JSON object with an integer "step".

    The one policy for every reader: a missing file has no records, bytes that are not UTF-8 are replaced,
    and any other line (one cut off by a crash or a full disk, or not a record) is left out and its number
    listed in `skipped`, for a caller that must refuse a damaged log.
    """
    path = Path(path)
    if not path.exists():
        return MetricRecords([], [])
    records, skipped = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, int) and not isinstance(step, bool):
            records.append(entry)
        else:
            skipped.append(number)
    return MetricRecords(records, skipped)
