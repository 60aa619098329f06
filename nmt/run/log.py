"""The run's metrics log: metrics.jsonl (and TensorBoard when installed), written by rank 0 only."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from nmt.errors import ConfigError
from nmt.fileio import atomic_output
from nmt.run.folder import RunDir, read_metrics

INSTALL_TENSORBOARD = "pip install tensorboard (or make install, which installs the serve extra)"


def check_tensorboard(wanted: bool) -> None:
    """Fail early when `train.tensorboard` is set but not installed."""
    if not wanted:
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401 - the import is the check
    except ImportError:
        raise ConfigError(f"train.tensorboard: true needs the tensorboard package; {INSTALL_TENSORBOARD}") from None


class MetricsLog:
    """Appends one JSON line per record; `truncate` drops lines after a resumed checkpoint's step."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool = False) -> None:
        check_tensorboard(tensorboard)
        run = RunDir(run_dir)
        self.path, self.tb_dir = run.metrics, run.tensorboard
        self.enabled, self.tensorboard = enabled, tensorboard
        self.tb = None
        self.window = [time.monotonic(), 0.0, 0.0, 0.0]  # start, target and source tokens, updates
        self.curve = run.curve

    def truncate(self, step: int) -> None:
        """Keep the records up to `step`, rewriting the log atomically, to match a run resumed there."""
        if not self.enabled or not self.path.exists():
            return
        kept = [entry for entry in read_metrics(self.path) if entry["step"] <= step]
        with atomic_output(self.path) as handle:
            handle.writelines(json.dumps(entry) + "\n" for entry in kept)

    def open(self) -> None:
        """Start the throughput window, and TensorBoard if asked for, its event files rebuilt from metrics.jsonl so
        a resume neither repeats nor loses steps."""
        self.window = [time.monotonic(), 0.0, 0.0, 0.0]
        if not self.enabled or not self.tensorboard:
            return
        from torch.utils.tensorboard import SummaryWriter

        for old in self.tb_dir.glob("events.out.tfevents.*"):
            old.unlink(missing_ok=True)
        self.tb = SummaryWriter(str(self.tb_dir))
        for entry in read_metrics(self.path):
            self._scalars(entry)
            self._examples(entry)

    def record(self, entry: dict[str, Any]) -> None:
        """Append `entry` (with "type" and "step")."""
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
        self._scalars(entry)
        self._examples(entry)

    def _scalars(self, entry: dict[str, Any]) -> None:
        if self.tb is not None:
            for key, value in entry.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tb.add_scalar(f"{entry['type']}/{key}", value, entry["step"])

    def _examples(self, entry: dict[str, Any]) -> None:
        """A validation's example translations in TensorBoard's text tab, as a Markdown table."""
        if self.tb is not None and entry.get("examples"):
            rows = ["| source | reference | hypothesis |", "|---|---|---|"]
            rows += ["| " + " | ".join(str(example.get(key, "")).replace("|", "\\|")
                                       for key in ("source", "reference", "hypothesis")) + " |"
                     for example in entry["examples"]]
            self.tb.add_text("examples", "\n".join(rows), entry["step"])

    def count(self, tgt_tokens: float, src_tokens: float) -> None:
        """Add an update's tokens (of all ranks) to the throughput window."""
        self.window[1] += tgt_tokens
        self.window[2] += src_tokens
        self.window[3] += 1

    def train(self, step: int, epoch: int, stats: dict[str, float], skipped: int, elapsed: float,
              outlook: dict[str, Any]) -> dict[str, Any]:
        """Record and return a training entry with the throughput since the previous one and the `outlook`."""

        seconds = max(time.monotonic() - self.window[0], 1e-9)
        entry = {"type": "train", "step": step, "epoch": epoch, **{k: v for k, v in stats.items() if k != "tokens"},
                 "ppl": math.exp(min(stats["nll"], 50.0)), "updates_s": self.window[3] / seconds,
                 "tgt_tok_s": self.window[1] / seconds, "src_tok_s": self.window[2] / seconds, "skipped": skipped,
                 "elapsed": elapsed, **outlook}
        self.record(entry)
        self.window = [time.monotonic(), 0.0, 0.0, 0.0]
        return entry

    def draw_curve(self, title: str) -> None:
        """Redraw the run's learning curve (curve.png) from metrics.jsonl."""
        if not self.enabled:
            return
        from nmt.plots import run_curves

        run_curves([(title, read_metrics(self.path))], self.curve)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None
