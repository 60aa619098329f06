"""The layout of a run folder (run_root/name), in one place, and the one reader of its metrics log.

Names and paths only: this module creates, locks and writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class RunDir:
    """The paths of one run folder's files."""

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
    STEPS = "step_*.pt"  # the best k validations' checkpoints
    FINAL_ORDER = (AVERAGED, BEST, LAST)  # a run folder stands for the first found

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @classmethod
    def of(cls, model: str | Path) -> RunDir:
        """The run folder a model path (folder, checkpoint, or other file) belongs to."""
        model = Path(model)
        if model.is_dir():
            return cls(model)
        return cls(model.parent.parent if model.parent.name == cls.CHECKPOINTS else model.parent)

    @property
    def name(self) -> str:
        """The run's folder name."""
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
        """A file in checkpoints/ by name."""
        return self.checkpoints / name

    def step(self, step: int) -> Path:
        """The checkpoint kept for the validation at `step`."""
        return self.checkpoints / f"step_{step}.pt"

    def finals(self) -> list[Path]:
        """The checkpoints the run folder may stand for, preferred first."""
        return [self.checkpoints / name for name in self.FINAL_ORDER]

    @staticmethod
    def report_name(split: str) -> str:
        """A split's evaluation report's file name."""
        return f"eval_{split}.json"

    @staticmethod
    def hypotheses_name(split: str, language: str) -> str:
        """The file name of an evaluation's translations (test.hyp.en)."""
        return f"{split}.hyp.{language}"

    def report(self, split: str) -> Path:
        """The evaluation report of a split."""
        return self.path / self.report_name(split)

    def hypotheses(self, split: str, language: str) -> Path:
        """An evaluation's translations."""
        return self.path / self.hypotheses_name(split, language)

    def outputs(self, language: str, tokenizer_files: tuple[str, ...] = ()) -> list[Path]:
        """The files nmt-train writes for a model into `language`, with `tokenizer_files`."""
        return [self.config, self.log, self.metrics, self.report("test"), self.hypotheses("test", language),
                self.length_penalty, self.curve, *(self.tokenizer / name for name in tokenizer_files), self.last,
                self.best, self.averaged]

    def read_metrics(self) -> MetricRecords:
        """The records of this run's metrics.jsonl."""
        return read_metrics(self.metrics)


class MetricRecords(list):
    """A metrics log's records in order; `skipped`: numbers (from 1) of the lines left out."""

    def __init__(self, records: list[dict[str, Any]], skipped: list[int]) -> None:
        super().__init__(records)
        self.skipped = skipped


def read_metrics(path: str | Path) -> MetricRecords:
    """The records of a metrics log: lines that are JSON objects with an integer "step"; others are `skipped`
    (a missing file has none)."""

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
