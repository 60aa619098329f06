"""A training run's whole life, in order: checks, the process group, the run folder's lock, data preparation,
the trainer, resume or start, the tokenizer, the training itself, the exit status after a signal, the final
checkpoint, length-penalty tuning, and the test evaluation with its report.

`run_training` is nmt-train; `prepare_trainer` is only its set-up (config -> data -> Trainer), for benchmarks.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import CheckpointError, load_model
from nmt.commandline import USER_ERRORS, device, setup_logging
from nmt.config import AUTO, FILES_KEYS, Config, ConfigError
from nmt.data import Split, prepare, summary
from nmt.distributed import all_true, barrier, current, init_distributed, joined, shutdown_distributed
from nmt.evaluate import TUNING_SUMMARY, evaluate, penalty_table, split_pair, tune_and_store, write_json, write_report
from nmt.evaluate import summary as eval_summary
from nmt.fileio import FileError, check_input, check_output
from nmt.models import build_model
from nmt.rundir import RunDir
from nmt.runlock import RunLockError, run_lock
from nmt.runlog import check_tensorboard
from nmt.signals import exit_status, graceful_stop, signal_name, stop_signal
from nmt.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE
from nmt.train import Progress, Trainer, pairs_within, ranking, validation_scores
from nmt.translator import from_loaded

log = logging.getLogger("nmt")


def _quiet(_msg: str) -> None:
    """A progress callback that says nothing."""


def run_training(cfg: Config, restart: bool = False, evaluate_test: bool = True, command: str = "nmt-train") -> int:
    """Train `cfg` in its run folder from start (or resume) to the final report; returns the exit status.

    Under torchrun every rank runs this; rank 0 holds the lock, validates and writes. `restart` deletes an
    earlier run's checkpoints and metrics; `evaluate_test` False skips the test evaluation (an `auto` length
    penalty is still tuned); `command` is the command line the report records.
    """
    own_group = not joined()  # a group the caller joined before (a test's worker) stays the caller's to end
    where = init_distributed(cfg.train.device) or device(cfg.train.device)
    with contextlib.ExitStack() as held:
        owner = _start(cfg, restart, where, held)
        status = _train(cfg, restart, evaluate_test, command, owner, where)
    if own_group:  # a run that ended: NCCL's communicators freed, not left to the interpreter's exit
        shutdown_distributed()
    return status


def _start(cfg: Config, restart: bool, where: torch.device, held: contextlib.ExitStack) -> str:
    """Every rank checks, then all agree: a rank that stopped here while the others trained would pair its next
    collective with theirs. Rank 0 takes the run folder's lock for every rank; returns the lock's previous owner."""
    place = current(where)
    owner, problem = "", None
    try:
        check_data_paths(cfg)
        _check_run_paths(cfg)
        check_tensorboard(cfg.train.tensorboard)
        _check_fresh_start(RunDir(cfg.run_dir), restart)
        if place.main:
            owner = held.enter_context(run_lock(cfg.run_dir))
    except USER_ERRORS as err:
        problem = err
    if not all_true(place, problem is None):
        raise problem or RunLockError(f"{cfg.run_dir}: another process of this torchrun job could not start "
                                      "the run (see its error line)")
    return owner


def _train(cfg: Config, restart: bool, evaluate_test: bool, command: str, previous_owner: str,
           where: torch.device) -> int:
    """The run while the run folder is locked: set up, resume or start, train, then the final model's reports."""
    run, rank = RunDir(cfg.run_dir), current(where).rank
    setup_logging(run.path, rank)
    if previous_owner:
        log.warning("took over the run folder's lock from a training that ended without releasing it (%s)",
                    previous_owner)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    trainer = prepare_trainer(cfg, where, log.info)
    _check_validation_lengths(trainer.data.splits["val"], trainer.model.max_positions, rank)
    if run.last.exists() and not restart:
        trainer.resume(run.last)
    if rank == 0:  # only now: a refused resume leaves the run's tokenizer as it was
        trainer.data.tokenizer.save(run.tokenizer)
    try:
        with graceful_stop():
            progress = trainer.fit()
    except FileError as err:
        raise FileError(f"{err}; training stopped at step {trainer.progress.step}") from None
    if trainer.interrupted:  # every rank agrees, also one that received no signal itself
        signum = stop_signal() or signal.SIGTERM
        log.info("stopped by %s at step %d; last.pt is saved: run the same command again to resume",
                 signal_name(signum), progress.step)
        return exit_status(signum)
    if rank != 0:
        return 0
    log.info("training stopped at step %d after %.1f minutes", progress.step, progress.elapsed / 60)
    return _final_reports(trainer, progress, evaluate_test, command)


def prepare_trainer(cfg: Config, where: torch.device | None = None,
                    say: Callable[[str], None] = _quiet) -> Trainer:
    """The set-up of a training without its run: the config's data prepared (cached, as nmt-prepare does) and
    a Trainer on `where` (None: train.device). Nothing is written to the run folder.

    Under torchrun rank 0 prepares first and the others then read its cache (and meet its error, if any);
    rank 0 tells `say` what it prepared.
    """
    where = where or device(cfg.train.device)
    place = current(where)
    if place.rank:
        barrier(place)
    try:
        data = prepare(cfg, log=say if place.main else _quiet)
    finally:
        if place.main:
            barrier(place)
    if place.main:
        say(f"\n{summary(data)}")
    return Trainer(cfg, data, where)


def final_checkpoint(trainer: Trainer) -> tuple[Path, dict[str, Any]]:
    """Rank 0 after training: the final model and how it was chosen.

    With train.average_last k > 1 it is the average of the best k checkpoints when that validates at least as
    well as best.pt, else best.pt: an average that takes in an early, much worse checkpoint can score below the
    best one alone. averaged.pt exists only for an average that was chosen.
    """
    best, k, checkpoints = trainer.progress.best, trainer.cfg.train.average_last, trainer.checkpoints
    if k <= 1 or len(best) < 2:
        return checkpoints.final(None), {"checkpoint": RunDir.BEST}
    averaged = checkpoints.average(best, k)
    model = build_model(trainer.cfg.model, trainer.vocab).to(trainer.device)
    model.load_state_dict(averaged.model)
    metric, score = ranking(trainer.cfg.train, validation_scores(model, trainer.data, trainer.cfg, trainer.device))
    sign = 1.0 if metric == "bleu" else -1.0  # the loss is ranked by its negative
    choice = {"averaged_steps": [b["step"] for b in best[:k]], "metric": metric, "average": sign * score,
              "best": sign * best[0]["score"]}
    if score >= best[0]["score"]:
        log.info("final model: the average of steps %s (validation %s %.3f; best.pt %.3f)",
                 choice["averaged_steps"], metric, choice["average"], choice["best"])
        return checkpoints.final(averaged), {"checkpoint": RunDir.AVERAGED, **choice}
    log.warning("final model: best.pt, as the average of steps %s validates worse (%s %.3f against %.3f); "
                "nmt-average can still make it", choice["averaged_steps"], metric, choice["average"], choice["best"])
    return checkpoints.final(None), {"checkpoint": RunDir.BEST, **choice}


def _final_reports(trainer: Trainer, progress: Progress, evaluate_test: bool, command: str) -> int:
    """Rank 0 after training: the final checkpoint, its length penalty (auto) and its test report."""
    cfg, run, where = trainer.cfg, RunDir(trainer.cfg.run_dir), trainer.device
    tune, test = cfg.decode.length_penalty == AUTO, evaluate_test and "test" in trainer.data.splits
    if not (tune or test):  # no final model is chosen: an averaged.pt of an earlier end would stand for the run
        trainer.checkpoints.final(None)
        return 0
    final, choice = final_checkpoint(trainer)  # best.pt, or the best k averaged when that validates as well
    tuning = None
    if tune:  # the penalty is chosen on the validation split and stored in the final checkpoint
        tuning = tune_and_store(from_loaded([load_model(final, where)], where, cfg.train.precision), final)
        write_json(tuning, run.length_penalty)
        log.info("length penalty chosen on the validation split: %g\n%s", tuning["best"], penalty_table(tuning))
    if not test:
        return 0
    translator = from_loaded([load_model(final, where)], where, cfg.train.precision)
    report, hyps = evaluate(translator, *split_pair(translator, "test"), "test", command)
    report["train"] = {"steps": progress.step, "minutes": round(progress.elapsed / 60, 2),
                       "parameters": trainer.n_params}
    report["final_model"] = choice
    if tuning is not None:
        report["length_penalty_tuning"] = {key: tuning[key] for key in TUNING_SUMMARY}
    write_report(report, hyps, run.report("test"), run.hypotheses("test"))
    print(eval_summary(report))
    return 0


def _data_inputs(cfg: Config) -> list[tuple[str, str]]:
    """The user's own data files, by config key (the sample and Multi30k files are the program's)."""
    if cfg.data.dataset != "files":
        return []
    return [(f"data.{key}", getattr(cfg.data, key)) for key in FILES_KEYS if getattr(cfg.data, key)] + [
        (f"data.train_corpora[{i}]", path) for i, entry in enumerate(cfg.data.train_corpora) for path in entry]


def check_data_paths(cfg: Config) -> None:
    """The folders nmt-prepare writes must be folders (or creatable) before any data is read."""
    check_output("data.cache_dir", cfg.data.cache_dir, folder=True)
    if cfg.data.dataset == "multi30k":
        check_output("data.download_dir", cfg.data.download_dir, folder=True)
    for key, path in _data_inputs(cfg):
        check_input(key, path)


def _check_run_paths(cfg: Config) -> None:
    """The run folder must be a folder, and nothing a training writes there may be one of its data files.

    The config file itself may be the run's config.yaml: rewriting it with the resolved config is how a
    run folder records what it ran.
    """
    check_output("run folder (run_root/name)", cfg.run_dir, folder=True)
    inputs = _data_inputs(cfg)
    for path in RunDir(cfg.run_dir).outputs((JOINT_FILE, SRC_FILE, TGT_FILE)):
        check_output("run file", path, inputs)


def _check_fresh_start(run: RunDir, restart: bool) -> None:
    """A folder with checkpoints but no last.pt to resume from is emptied only when --restart asks for it."""
    if not restart and not run.last.exists() and any(run.checkpoints.glob("*.pt")):
        raise CheckpointError(f"{run.checkpoints}: holds checkpoints of an earlier run but no last.pt to resume "
                              "from; give --restart to delete them and start over, or choose another name")


def _check_validation_lengths(split: Split, max_positions: int | None, rank: int) -> None:
    """Refuse a validation set the loss cannot read at all; say when it leaves out some pairs."""
    fits = len(pairs_within(split, max_positions))
    if not fits:
        raise ConfigError(f"model.max_positions ({max_positions}): every validation pair is longer, so no "
                          "validation loss can be computed; raise it (or shorten the validation set)")
    if fits < len(split) and rank == 0:
        log.warning("the validation loss leaves out %d of %d pairs longer than model.max_positions (%d); "
                    "BLEU translates them truncated", len(split) - fits, len(split), max_positions)

