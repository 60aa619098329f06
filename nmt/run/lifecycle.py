"""A training run's whole life: checks, process group, lock, data, trainer (fresh, resumed or a child), training
and the trainer's end. `train_run` backs `nmt.train` and nmt-train; `prepare_trainer` is only its set-up."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nmt.config import FILES_KEYS, Config, absolute_paths
from nmt.data import Split, prepare, summary, vocabulary_warning
from nmt.distributed import all_true, barrier, current, init_distributed, joined, shutdown_distributed
from nmt.errors import CheckpointError, ConfigError, FileError, NmtError, RunLockError, TrainingInterrupted
from nmt.fileio import check_input, check_output
from nmt.finetune import Parent, load_parent
from nmt.run.folder import RunDir
from nmt.run.lock import run_lock
from nmt.run.log import check_tensorboard
from nmt.signals import graceful_stop, signal_name, stop_signal
from nmt.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE
from nmt.trainer import Trainer, pairs_within
from nmt.utils import resolve_device

if TYPE_CHECKING:
    from nmt.translator import Translator

log = logging.getLogger("nmt")


def _quiet(_msg: str) -> None:
    """A progress callback that says nothing."""


@dataclass
class Run:
    """A finished training run (what `nmt.train` returns)."""

    path: Path
    config: Config
    steps: int
    minutes: float
    checkpoint: Path | None = None  # the final model; None on ranks other than 0
    report: dict[str, Any] | None = None  # eval_test.json, when the test split was scored
    final_model: dict[str, Any] = field(default_factory=dict)  # how the final model was chosen

    def translator(self, device: str | torch.device = "auto", **decoding: Any) -> Translator:
        """A translator for the final model, as `nmt.load` gives it."""
        from nmt.loader import load_translator

        return load_translator([self.checkpoint or self.path], device, changes=decoding)


def train_run(cfg: Config, restart: bool = False, evaluate_test: bool = True, command: str = "nmt.train") -> Run:
    """Train `cfg` in its run folder from start (or resume) to the final report; every torchrun rank runs this.

    `restart` deletes an earlier run's checkpoints; `evaluate_test` False skips the test evaluation; `command` is
    recorded in the report. A signal saves last.pt and raises TrainingInterrupted.
    """
    cfg = absolute_paths(cfg)  # valid from any working folder
    parent = load_parent(cfg) if cfg.train.init_from else None  # refused before anything is written
    if parent is not None:
        cfg = parent.child_config(cfg)
    own_group = not joined()  # a group the caller joined stays the caller's to end
    device = init_distributed(cfg.train.device) or resolve_device(cfg.train.device)
    try:
        with contextlib.ExitStack() as resources:
            owner = _start(cfg, restart, device, resources)
            resources.enter_context(_run_log(RunDir(cfg.run_dir), current(device).rank))
            return _train(cfg, restart, evaluate_test, command, owner, device, parent, own_group)
    finally:
        if own_group:  # free NCCL's communicators now, not at interpreter exit
            shutdown_distributed()


class _QuietFileHandler(logging.FileHandler):
    """train.log, without a traceback per line when the disk is full."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass


@contextlib.contextmanager
def _run_log(run: RunDir, rank: int) -> Iterator[None]:
    """Rank 0's `nmt` log also goes to train.log (at INFO unless set) while the run lasts."""
    logger = logging.getLogger("nmt")
    if rank != 0:
        yield
        return
    run.path.mkdir(parents=True, exist_ok=True)
    handler = _QuietFileHandler(run.log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
    level = logger.level
    if level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def _start(cfg: Config, restart: bool, device: torch.device, resources: contextlib.ExitStack) -> str:
    """Every rank checks, then all agree (so none stops alone); rank 0 takes the lock. Returns its previous owner."""
    dist = current(device)
    owner, problem = "", None
    try:
        check_data_paths(cfg)
        _check_run_paths(cfg)
        check_tensorboard(cfg.train.tensorboard)
        _check_fresh_start(RunDir(cfg.run_dir), restart)
        if dist.main:
            owner = resources.enter_context(run_lock(cfg.run_dir))
    except NmtError as err:
        problem = err
    if not all_true(dist, problem is None):
        raise problem or RunLockError(f"{cfg.run_dir}: another process of this torchrun job could not start "
                                      "the run (see its error line)")
    return owner


def _train(cfg: Config, restart: bool, evaluate_test: bool, command: str, previous_owner: str,
           device: torch.device, parent: Parent | None, own_group: bool) -> Run:
    """The run while the folder is locked: set up, resume or start, train, finish. A group of its own is left by
    every rank at once when the updates end, before rank 0 finishes alone."""
    run, rank = RunDir(cfg.run_dir), current(device).rank
    if previous_owner:
        log.warning("took over the run folder's lock from a training that ended without releasing it (%s)",
                    previous_owner)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    trainer = prepare_trainer(cfg, device, log.info, parent)
    _check_validation_lengths(trainer.data.splits["val"], trainer.model.max_positions, rank)
    if run.last.exists() and not restart:
        trainer.resume(run.last)
    else:
        if rank == 0:
            log.info("starting from step 0: %s", "--restart asked for it" if restart and run.last.exists() else
                     f"nothing to resume in {run.checkpoints} (no {RunDir.LAST})")
        if parent is not None:
            trainer.start_from(parent)
    if rank == 0:  # after resume, so a refused resume keeps the old tokenizer
        trainer.data.tokenizer.save(run.tokenizer)
    try:
        with graceful_stop():
            progress = trainer.fit()
            signum = stop_signal()  # 0 once the block ends
    except FileError as err:
        raise FileError(f"{err}; training stopped at step {trainer.progress.step}") from None
    if own_group:
        trainer.leave_group()
    if trainer.interrupted:  # agreed by every rank
        signum = signum or signal.SIGTERM
        raise TrainingInterrupted(f"stopped by {signal_name(signum)} at step {progress.step}; last.pt is saved in "
                                  f"{run.checkpoints}: train the same config again to resume", signum)
    result = Run(run.path, trainer.cfg, progress.step, round(progress.elapsed / 60, 2))
    if rank != 0:
        return result
    log.info("training stopped at step %d after %.1f minutes", progress.step, progress.elapsed / 60)
    outcome = trainer.finish(evaluate_test, command)
    result.checkpoint, result.report, result.final_model = outcome.checkpoint, outcome.report, outcome.choice
    return result


def prepare_trainer(cfg: Config, device: torch.device | None = None, log_line: Callable[[str], None] = _quiet,
                    parent: Parent | None = None) -> Trainer:
    """A Trainer on `device` (None: train.device) with the config's data prepared, writing nothing to the run
    folder. With a `parent`, `cfg` is the child's and the data uses the parent's tokenizer. Under torchrun rank 0
    prepares first and the others read its cache."""
    device = device or resolve_device(cfg.train.device)
    dist = current(device)
    if dist.rank:
        barrier(dist)
    try:
        data = prepare(cfg, log=log_line if dist.main else _quiet, tokenizer=parent.tokenizer if parent else None)
    finally:
        if dist.main:
            barrier(dist)
    trainer = Trainer(cfg, data, device)
    if dist.main:
        log_line(f"\n{summary(data, trainer.sampler)}")  # reuses the trainer's sampler
        if parent is None and (advice := vocabulary_warning(data)):  # a child cannot choose its vocabulary
            log.warning("%s", advice)
    return trainer


def _data_inputs(cfg: Config) -> list[tuple[str, str]]:
    """The user's own data files, by config key."""
    corpora = [(f"data.train_corpora[{i}]", path) for i, entry in enumerate(cfg.data.corpora) for path in entry.files]
    if cfg.data.dataset != "files":
        return corpora
    return [(f"data.{key}", getattr(cfg.data, key)) for key in FILES_KEYS if getattr(cfg.data, key)] + corpora


def check_data_paths(cfg: Config) -> None:
    """Check data paths and nmt-prepare's output folders before any data is read."""
    check_output("data.cache_dir", cfg.data.cache_dir, folder=True)
    if cfg.data.dataset == "multi30k":
        check_output("data.download_dir", cfg.data.download_dir, folder=True)
    for key, path in _data_inputs(cfg):
        check_input(key, path)


def _check_run_paths(cfg: Config) -> None:
    """The run folder must be a folder, and no file a training writes there may be one of its data files."""
    check_output("run folder (run_root/name)", cfg.run_dir, folder=True)
    inputs = _data_inputs(cfg)
    for path in RunDir(cfg.run_dir).outputs(cfg.data.languages[1], (JOINT_FILE, SRC_FILE, TGT_FILE)):
        check_output("run file", path, inputs)
    if cfg.train.init_from and RunDir(cfg.run_dir).path.resolve() == Path(cfg.train.init_from).resolve():
        raise ConfigError(f"train.init_from {cfg.train.init_from}: is this run's own folder; a child needs a run "
                          "folder of its own (another name)")


def _check_fresh_start(run: RunDir, restart: bool) -> None:
    """Refuse a folder with checkpoints but no last.pt unless --restart."""
    if not restart and not run.last.exists() and any(run.checkpoints.glob("*.pt")):
        raise CheckpointError(f"{run.checkpoints}: holds checkpoints of an earlier run but no last.pt to resume "
                              "from; give --restart to delete them and start over, or choose another name")


def _check_validation_lengths(split: Split, max_positions: int | None, rank: int) -> None:
    """Refuse a validation set with no pair within `max_positions`; warn when some are left out."""

    fits = len(pairs_within(split, max_positions))
    if not fits:
        raise ConfigError(f"model.max_positions ({max_positions}): every validation pair is longer, so no "
                          "validation loss can be computed; raise it (or shorten the validation set)")
    if fits < len(split) and rank == 0:
        log.warning("the validation loss leaves out %d of %d pairs longer than model.max_positions (%d); "
                    "BLEU translates them truncated", len(split) - fits, len(split), max_positions)
