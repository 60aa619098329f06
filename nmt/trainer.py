"""The trainer: one update, validation, stopping rules, exact resume and DDP."""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import sacrebleu
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from nmt.checkpoint import (
    CheckpointContents,
    LoadedModel,
    RunCheckpoints,
    TrainingState,
    load_contents,
    load_for_resume,
)
from nmt.config import AUTO, Config, TrainConfig, save_config
from nmt.data import Batch, Prepared, Split, TokenBatchSampler, collate
from nmt.data.batching import stream_batches
from nmt.distributed import UpdateTally, barrier, current, gather_objects, shutdown_distributed
from nmt.engines.pytorch import TorchEngine
from nmt.errors import CheckpointError, TrainingError
from nmt.evaluation import TUNING_SUMMARY, evaluate, penalty_table, split_pair, tune_and_store, write_report
from nmt.fileio import write_json
from nmt.kernels import keep_freed_memory, label_smoothed_loss, real_targets
from nmt.loader import from_loaded
from nmt.models import build_model, count_parameters
from nmt.optim import Plateau, build_optimizer, learning_rate, set_lr
from nmt.run.folder import RunDir
from nmt.run.log import MetricsLog
from nmt.signals import stop_signal
from nmt.translator import Translator
from nmt.utils import autocast, rank_seed, rng_state, seed_everything, set_rng_state

if TYPE_CHECKING:
    from nmt.finetune import Parent

log = logging.getLogger("nmt.trainer")


@dataclass
class Progress:
    """Everything about the run's position that a resume must restore."""

    step: int = 0
    elapsed: float = 0.0
    skipped: int = 0
    nonfinite_in_row: int = 0
    bad_validations: int = 0
    pending_validation: bool = False  # a signal skipped a due validation: the resume runs it first
    best: list[dict] = field(default_factory=list)  # [{"score", "step", "path"}], best first
    parent: dict[str, str] = field(default_factory=dict)  # train.init_from's path and sha256


@dataclass
class TrainingOutcome:
    """How a run ended (rank 0): its final model, how that was chosen, and its test report."""

    checkpoint: Path
    choice: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None


@dataclass
class StepResult:
    """What one `train_step` did, as every rank agreed."""

    applied: bool  # False: skipped (non-finite) or dropped (early stop)
    stop: bool
    early_stop: bool
    interrupted: bool  # stop without validating
    stats: dict[str, float]  # loss, nll, lr, grad_norm, tokens
    save: bool = False  # write last.pt after this update


@dataclass
class Outlook:
    """The run's pace and what is left before the first limit ends it."""

    rate: float  # updates per second this session, validations included
    updates: float  # inf: not known yet
    seconds: float
    limit: str  # the train.* key that ends the run first

    def describe(self) -> str:
        """'12m05s left (max_epochs)', or 'time left not known yet'."""
        if not math.isfinite(self.seconds):
            return "time left not known yet"
        return f"{duration(self.seconds)} left ({self.limit})"

    def record(self) -> dict[str, Any]:
        """The fields of a metrics.jsonl training record."""
        known = math.isfinite(self.seconds)
        return {"updates_left": round(self.updates) if known else None,
                "seconds_left": round(self.seconds, 1) if known else None, "limit": self.limit}


def duration(seconds: float) -> str:
    """A time span as 1h02m, 4m10s or 35s."""
    whole = int(round(seconds))
    hours, minutes, secs = whole // 3600, whole // 60 % 60, whole % 60
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Trainer:
    """Trains one model on prepared data; rank 0 validates and writes the run folder."""

    def __init__(self, cfg: Config, data: Prepared, device: torch.device) -> None:
        self.cfg, self.data, tcfg = cfg, data, cfg.train
        self.dist = current(device)
        self.device, self.rank, self.world = device, self.dist.rank, self.dist.world
        self.vocab = data.tokenizer.vocab
        _set_up_device(device, tcfg.tf32)
        seed_everything(tcfg.seed)  # the same initial weights on every rank
        self.model = build_model(cfg.model, self.vocab).to(device)
        seed_everything(rank_seed(tcfg.seed, self.rank))  # per-rank dropout noise
        self.n_params = count_parameters(self.model)
        self.net: torch.nn.Module = self.model
        if self.dist.group:
            self.net = DistributedDataParallel(self.model, device_ids=[device.index] if device.type == "cuda" else None)
        if tcfg.compile:
            self.net = torch.compile(self.net)
        self.optimizer = build_optimizer(self.model, tcfg)
        self.scaler = torch.amp.GradScaler(device.type, enabled=tcfg.precision == "fp16")
        self.plateau = Plateau(tcfg.plateau_factor, tcfg.plateau_patience, tcfg.min_lr,
                               tcfg.early_stop_metric == "bleu")
        train = data.splits["train"]
        self.sampler = TokenBatchSampler(train.src_lens, train.tgt_lens, tcfg.batch_tokens, seed=tcfg.seed,
                                         num_replicas=self.world, rank=self.rank)
        self.progress = Progress()
        self.checkpoints = RunCheckpoints(RunDir(cfg.run_dir), tcfg.keep_best)
        self.metrics = MetricsLog(cfg.run_dir, self.dist.main, tcfg.tensorboard)
        self.early_stop = self.interrupted = False
        self.clock = (time.monotonic(), 0.0)  # this session's (start, progress.elapsed at start)
        self.saved_at = self.logged_at = time.monotonic()  # last last.pt; last training log line

    def contents(self, training: bool = True, rngs: list[dict] | None = None) -> CheckpointContents:
        """The run as checkpoint contents, with training state (`rngs`: every rank's RNG)."""
        rngs = rngs or [rng_state(self.device)]
        state = TrainingState(self.optimizer.state_dict(), self.scaler.state_dict(), self.plateau.state_dict(),
                              self.sampler.state_dict(), rngs[0], rngs) if training else None
        return CheckpointContents.build(self.cfg, self.data.tokenizer, self.model, vars(self.progress).copy(), state)

    def resume(self, path: Path) -> None:
        """Restore the whole training state of `path` (CheckpointError if incompatible), cutting the metrics log and
        checkpoint folder back to it."""
        bundle = load_for_resume(path, self.cfg, self.data.tokenizer.identity, self.world)
        state = bundle.training
        self.model.load_state_dict(bundle.model)
        try:
            for part, saved in ((self.optimizer, state.optimizer), (self.scaler, state.scaler),
                                (self.plateau, state.plateau), (self.sampler, state.sampler)):
                if saved or part is not self.scaler:  # fp32/bf16 runs save no loss scale
                    part.load_state_dict(saved)
        except (ValueError, RuntimeError, KeyError, TypeError) as err:
            detail = f"no entry {err}" if isinstance(err, KeyError) else " ".join(str(err).split())
            raise CheckpointError(f"{path}: its training state does not fit this run ({detail})") from None
        self.progress = Progress(**bundle.progress)
        self.early_stop = 0 < self.cfg.train.patience <= self.progress.bad_validations
        if self.dist.main:
            self.checkpoints.tidy(self.progress.best)
        try:
            set_rng_state(state.rng_for(self.rank, self.world), self.device)
        except CheckpointError as err:
            raise CheckpointError(f"{path}: {err}") from None
        self.metrics.truncate(self.progress.step)
        log.info("resumed from %s at step %d (epoch %d)", path, self.progress.step, self.sampler.epoch)

    def start_from(self, parent: Parent) -> None:
        """A fine-tuning child's fresh start from the parent's weights."""
        try:
            self.model.load_state_dict(parent.weights)
        except RuntimeError as err:
            detail = " ".join(str(err).split())
            raise CheckpointError(f"train.init_from {parent.path}: its weights do not fit the model "
                                  f"({detail})") from None
        self.progress.parent = parent.record()
        log.info("fine-tuning from %s (sha256 %s)", parent.path, parent.sha256[:12])

    def batches(self) -> Iterator[Batch]:
        """This rank's training batches on the device until the epoch limit."""
        return stream_batches(self.data.splits["train"], self.sampler, self.vocab.pad_id, self.device,
                              self.cfg.train.max_epochs)

    def batch_groups(self) -> Iterator[list[Batch]]:
        """Groups of train.accumulate batches, one group per update."""
        stream = self.batches()
        while group := [b for _, b in zip(range(self.cfg.train.accumulate), stream)]:
            yield group

    def _out_of_epochs(self) -> bool:
        return 0 < self.cfg.train.max_epochs <= self.sampler.epoch

    def _wants_save(self) -> bool:
        """Rank 0's checkpoint clock: train.save_minutes have passed since the last last.pt."""
        limit = self.cfg.train.save_minutes * 60
        return self.dist.main and 0 < limit <= time.monotonic() - self.saved_at

    def _wants_stop(self) -> bool:
        """Rank 0's time budget is spent."""
        limit = self.cfg.train.max_minutes * 60
        return self.dist.main and 0 < limit <= self.clock[1] + time.monotonic() - self.clock[0]

    def train_step(self, group: list[Batch]) -> StepResult:
        """Forward/backward over `group`, one control exchange, one optimizer step unless skipped.

        Gradients are sums over target tokens (in fp16 scaled by a token guess), divided by the global token count.
        """
        tcfg = self.cfg.train
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        guess = 1.0 / (tcfg.batch_tokens * tcfg.accumulate) if tcfg.precision == "fp16" else 1.0
        loss_sum = nll_sum = torch.zeros((), device=self.device)
        for i, batch in enumerate(group):
            sync = i == len(group) - 1 or not self.dist.group
            with (nullcontext() if sync else self.net.no_sync()), autocast(self.device, tcfg.precision):
                logits, target = self._forward(batch)  # (N, V), (N,)
                loss, nll, _ = label_smoothed_loss(logits, target, tcfg.label_smoothing, self.vocab.pad_id)
            self.scaler.scale(loss * guess).backward()
            loss_sum, nll_sum = loss_sum + loss.detach().float(), nll_sum + nll.detach().float()
        self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)  # (), on the device: read with the control vector
        finite = torch.isfinite(loss_sum) & torch.isfinite(norm)
        tally = UpdateTally(tokens=sum(b.n_tgt_tokens for b in group), loss=loss_sum, nll=nll_sum,
                            nonfinite=~finite, stop=self._wants_stop(), interrupt=bool(stop_signal()),
                            early_stop=self.early_stop, exhausted=self._out_of_epochs(),
                            grad_norm=norm if self.dist.main else 0.0, save=self._wants_save()).agree(self.dist)
        norm = tally.grad_norm
        stop = bool(tally.stop or tally.interrupt or tally.early_stop or tally.exhausted)
        stats = {"loss": tally.loss / tally.tokens, "nll": tally.nll / tally.tokens, "tokens": tally.tokens}
        if tally.nonfinite or tally.early_stop:
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.update()
            return StepResult(False, stop, bool(tally.early_stop), bool(tally.interrupt), stats, bool(tally.save))
        # undo DDP's averaging and the guess
        factor = self.world / (guess * tally.tokens)
        grad_norm = norm * factor
        limit = tcfg.clip_norm if tcfg.clip_norm > 0 else math.inf
        torch._foreach_mul_(grads, factor * min(1.0, limit / (grad_norm + 1e-6)))
        lr = learning_rate(self.progress.step + 1, tcfg, self.cfg.model.d_model, self.plateau)
        set_lr(self.optimizer, lr)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return StepResult(True, stop, False, bool(tally.interrupt), stats | {"lr": lr, "grad_norm": grad_norm},
                          bool(tally.save))

    def _forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits of the batch's real target positions (N, V) and their targets (N,): no output layer on padding."""
        keep, target = real_targets(batch.tgt_out, batch.tgt_positions, self.vocab.pad_id)  # (B, T) or (N,), (N,)
        return self.net(batch.src, batch.src_mask, batch.tgt_in, keep, batch.src_lengths), target  # (N, V), (N,)

    def record_validation(self, result: dict[str, float]) -> bool:
        """Keep best checkpoints, update plateau and patience; returns True when early stopping fires."""
        tcfg, prog = self.cfg.train, self.progress
        score = ranking(tcfg, result)[1]
        self.plateau.observe(score, tcfg.lr)
        prog.bad_validations = 0 if not prog.best or score > prog.best[0]["score"] else prog.bad_validations + 1
        self.checkpoints.keep(prog.best, score, prog.step, self.contents(training=False))
        return tcfg.patience > 0 and prog.bad_validations >= tcfg.patience

    def _checkpoint(self, validate: bool = True) -> None:
        """Every rank: gather the RNG states; rank 0 validates (if asked) and writes last.pt."""
        rngs = gather_objects(self.dist, rng_state(self.device))
        self.saved_at = time.monotonic()
        if not self.dist.main:
            return
        if validate:
            self._validate()
        self.checkpoints.save_last(self.contents(rngs=rngs))

    def _validate(self) -> None:
        """Rank 0: score the validation split and examples, record them, keep the best checkpoints, redraw the curve."""
        prog = self.progress
        prog.pending_validation = False
        result = validation_scores(self.model, self.data, self.cfg, self.device)
        examples = example_translations(self.model, self.data, self.cfg, self.device)
        self.metrics.record({"type": "valid", "step": prog.step, "epoch": self.sampler.epoch, **result,
                             "elapsed": prog.elapsed, **({"examples": examples} if examples else {})})
        log.info("validation at step %d: %s", prog.step, ", ".join(f"{k} {v:.3f}" for k, v in result.items()))
        for number, example in enumerate(examples, 1):
            log.info("example %d\n  source     %s\n  reference  %s\n  hypothesis %s", number, example["source"],
                     example["reference"], example["hypothesis"])
        self.early_stop = self.record_validation(result)
        self.metrics.draw_curve(self.cfg.name)

    def fit(self) -> Progress:
        """Train until every rank agrees to stop; rank 0 writes checkpoints and metrics."""
        tcfg, prog = self.cfg.train, self.progress
        if self.dist.main:
            if prog.step == 0:  # nothing of an earlier run stays
                self.metrics.truncate(0)
                self.checkpoints.clear()
            save_config(self.cfg, RunDir(self.cfg.run_dir).config)
        self.clock = (time.monotonic(), prog.elapsed)
        self.saved_at = self.logged_at = self.clock[0]
        first_step = prog.step
        if prog.pending_validation:
            self._checkpoint()
        first = UpdateTally(stop=self._wants_stop(), early_stop=self.early_stop,
                            exhausted=self._out_of_epochs()).agree(self.dist)
        if first.stop or first.exhausted or first.early_stop or 0 < tcfg.max_steps <= prog.step:
            return prog
        self.metrics.open()
        bar = tqdm(total=tcfg.max_steps or None, initial=prog.step, dynamic_ncols=True, desc=self.cfg.name,
                   unit="update", disable=not self.dist.main or not sys.stderr.isatty(),
                   bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")
        epoch = self.sampler.epoch
        for group in self.batch_groups():
            result = self.train_step(group)
            prog.elapsed = self.clock[1] + time.monotonic() - self.clock[0]
            self.metrics.count(result.stats["tokens"], self.world * sum(b.n_src_tokens for b in group))
            if result.early_stop:  # already saved by its validation
                break
            if not result.applied:
                self._skipped()
            else:
                prog.nonfinite_in_row = 0
                prog.step += 1
                outlook = self.outlook((prog.step - first_step) / max(time.monotonic() - self.clock[0], 1e-9))
                if not bar.disable:
                    bar.total = prog.step + round(outlook.updates) if math.isfinite(outlook.updates) else None
                    bar.set_postfix_str(outlook.describe(), refresh=False)
                    bar.update(1)
                if prog.step % tcfg.log_every == 0 or 0 < tcfg.log_minutes * 60 <= time.monotonic() - self.logged_at:
                    self._log_training(result.stats, outlook)
            self.interrupted = result.interrupted
            # step and sampler positions agree across ranks, so these tests do too
            finish = 0 < tcfg.max_steps <= prog.step or (result.stop and not result.interrupted)
            epoch_end, epoch = self.sampler.epoch != epoch and tcfg.eval_every == 0, self.sampler.epoch
            due = bool(tcfg.eval_every and prog.step % tcfg.eval_every == 0 and result.applied) or epoch_end or finish
            stop = result.stop or finish
            if due or stop:
                prog.pending_validation = due and result.interrupted
                self._checkpoint(validate=due and not result.interrupted)
            elif result.save or (tcfg.save_every and result.applied and prog.step % tcfg.save_every == 0):
                self._checkpoint(validate=False)
            if stop:
                break
        bar.close()
        self.metrics.close()
        return prog

    def outlook(self, rate: float) -> Outlook:
        """Updates and time left before max_steps, max_epochs or max_minutes ends the run, at `rate` updates/s."""
        tcfg, prog, sampler = self.cfg.train, self.progress, self.sampler
        left: dict[str, float] = {}
        if tcfg.max_steps:
            left["max_steps"] = max(tcfg.max_steps - prog.step, 0)
        if tcfg.max_epochs:
            batches = (tcfg.max_epochs - sampler.epoch) * len(sampler) - sampler.position
            left["max_epochs"] = max(batches, 0) / tcfg.accumulate
        if tcfg.max_minutes and rate > 0:
            left["max_minutes"] = max(tcfg.max_minutes * 60 - prog.elapsed, 0.0) * rate
        if not left:
            return Outlook(rate, math.inf, math.inf, "max_minutes")
        limit = min(left, key=lambda key: left[key])
        return Outlook(rate, left[limit], left[limit] / rate if rate > 0 else math.inf, limit)

    def _log_training(self, stats: dict[str, float], outlook: Outlook) -> None:
        """Rank 0's training record and log line."""
        prog = self.progress
        self.logged_at = time.monotonic()
        entry = self.metrics.train(prog.step, self.sampler.epoch, stats, prog.skipped, prog.elapsed, outlook.record())
        log.info("step %d epoch %d loss %.3f lr %.2e %.2f updates/s %.0f tgt tok/s, %s", prog.step, self.sampler.epoch,
                 entry["loss"], entry["lr"], entry["updates_s"], entry["tgt_tok_s"], outlook.describe())

    def leave_group(self) -> None:
        """After the last update, on every rank: wait for the others, let go of DDP and leave the process group
        together, so no rank tears its connections down while another still holds them."""
        if not self.dist.group:
            return
        barrier(self.dist)
        self.net = self.model  # DDP's reducer holds the group
        shutdown_distributed()
        self.dist = replace(self.dist, group=False)

    def finish(self, evaluate_test: bool, command: str) -> TrainingOutcome:
        """Rank 0 after training: the final model, its length penalty (tuned if auto) and its test report."""
        cfg, run = self.cfg, RunDir(self.cfg.run_dir)
        tune, test = cfg.decode.length_penalty == AUTO, evaluate_test and "test" in self.data.splits
        final, choice, model, progress = self.final_model()
        outcome, tuning = TrainingOutcome(final, choice), None
        if not (tune or test):
            return outcome
        loaded = LoadedModel(model.eval(), self.data.tokenizer, cfg, final, progress)
        if tune:
            tuning = tune_and_store(from_loaded([loaded], self.device, cfg.train.precision), final)
            write_json(run.length_penalty, tuning)
            loaded.cfg = replace(cfg, decode=replace(cfg.decode, length_penalty=tuning["best"]))
            log.info("length penalty chosen on the validation split: %g\n%s", tuning["best"], penalty_table(tuning))
        if not test:
            return outcome
        translator = from_loaded([loaded], self.device, cfg.train.precision)
        report, hyps = evaluate(translator, *split_pair(translator.cfg, "test"), "test", command)
        report["train"] = {"steps": self.progress.step, "minutes": round(self.progress.elapsed / 60, 2),
                           "parameters": self.n_params}
        report["final_model"] = choice
        if self.progress.parent:
            report["parent"] = self.progress.parent
        if tuning is not None:
            report["length_penalty_tuning"] = {key: tuning[key] for key in TUNING_SUMMARY}
        write_report(report, hyps, run.report("test"), run.hypotheses("test", translator.languages[1]))
        outcome.report = report
        return outcome

    def final_model(self) -> tuple[Path, dict[str, Any], torch.nn.Module, dict[str, Any]]:
        """The final checkpoint, how it was chosen, its model and its progress record: the average of the best k
        (train.average_last) where it validates at least as well as best.pt, else best.pt."""
        best, k, checkpoints = self.progress.best, self.cfg.train.average_last, self.checkpoints
        model = build_model(self.cfg.model, self.vocab).to(self.device)
        choice: dict[str, Any] = {}
        if k > 1 and len(best) >= 2:
            averaged = checkpoints.average(best, k)
            model.load_state_dict(averaged.model)
            metric, score = ranking(self.cfg.train, validation_scores(model, self.data, self.cfg, self.device))
            sign = 1.0 if metric == "bleu" else -1.0  # loss is ranked negated
            choice = {"averaged_steps": [b["step"] for b in best[:k]], "metric": metric, "average": sign * score,
                      "best": sign * best[0]["score"]}
            if score >= best[0]["score"]:
                log.info("final model: the average of steps %s (validation %s %.3f; best.pt %.3f)",
                         choice["averaged_steps"], metric, choice["average"], choice["best"])
                return checkpoints.final(averaged), {"checkpoint": RunDir.AVERAGED, **choice}, model, averaged.progress
            log.warning("final model: best.pt, as the average of steps %s validates worse (%s %.3f against %.3f); "
                        "nmt-average can still make it", choice["averaged_steps"], metric, choice["average"],
                        choice["best"])
        final = checkpoints.final(None)
        bundle = load_contents(final)
        model.load_state_dict(bundle.model)
        return final, {"checkpoint": RunDir.BEST, **choice}, model, bundle.progress

    def _skipped(self) -> None:
        prog = self.progress
        prog.skipped, prog.nonfinite_in_row = prog.skipped + 1, prog.nonfinite_in_row + 1
        log.warning("skipped an update with a non-finite loss or gradient (%d in a row)", prog.nonfinite_in_row)
        if prog.nonfinite_in_row >= self.cfg.train.max_nonfinite:
            self._checkpoint(validate=False)
            raise TrainingError(f"{prog.nonfinite_in_row} non-finite updates in a row at step {prog.step}; "
                                f"stopped (last good state saved in {self.checkpoints.run.last}). "
                                "Lower train.lr, raise train.warmup or use precision bf16/fp32.")


def _set_up_device(device: torch.device, tf32: bool) -> None:
    """The process-wide settings a training on `device` runs with."""
    if device.type == "cpu" and keep_freed_memory():  # the step's large buffers are reused, not re-faulted
        log.debug("glibc keeps freed memory for reuse")
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = tf32


def ranking(tcfg: TrainConfig, result: dict[str, float]) -> tuple[str, float]:
    """The metric checkpoints are ranked by ("bleu" or "loss") and `result`'s score on it (higher is better)."""
    if tcfg.early_stop_metric == "bleu" and "bleu" in result:
        return "bleu", result["bleu"]
    return "loss", -result["loss"]


def pairs_within(split: Split, max_positions: int | None) -> np.ndarray:
    """Indices of the pairs whose source and target (with EOS or BOS) fit in `max_positions` (None: all)."""
    fits = np.arange(len(split))  # (P,)
    if max_positions is None:
        return fits
    return fits[(split.src_lens < max_positions) & (split.tgt_lens < max_positions)]


def validation_scores(model: torch.nn.Module, data: Prepared, cfg: Config, device: torch.device) -> dict[str, float]:
    """Loss and perplexity on the validation pairs within the model's positions, and greedy BLEU on all of them
    when train.eval_bleu is set."""
    split, pad_id = data.splits["val"], data.tokenizer.vocab.pad_id
    model.eval()
    total, nll_sum = 0, torch.zeros((), dtype=torch.float64, device=device)
    fits = pairs_within(split, model.max_positions)  # (P,)
    sampler = TokenBatchSampler(split.src_lens[fits], split.tgt_lens[fits], cfg.train.batch_tokens, shuffle=False)
    with torch.inference_mode(), autocast(device, cfg.train.precision):
        for indices in sampler:
            batch = collate([(split.src[fits[i]], split.tgt[fits[i]]) for i in indices], pad_id).to(device)
            logits = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_positions, batch.src_lengths)  # (N, V)
            target = batch.tgt_out.flatten().index_select(0, batch.tgt_positions)  # (N,)
            nll_sum += label_smoothed_loss(logits, target, 0.0, pad_id)[1].double()
            total += batch.n_tgt_tokens
    loss = nll_sum.item() / max(total, 1)  # one wait for the device
    result = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
    if cfg.train.eval_bleu:
        greedy = replace(cfg.decode, beam=1, n_best=1)
        translator = Translator(TorchEngine(model, device, cfg.train.precision), data.tokenizer, greedy,
                                cfg.data.lowercase, cfg=cfg)
        hyps = [translator.detokenize(found[0]) if found else ""  # unsplit: aligned with references
                for found in translator.hypotheses(split.src_raw)]
        result["bleu"] = sacrebleu.corpus_bleu(hyps, [split.tgt_raw]).score
    return result


def example_indices(n_pairs: int, count: int) -> list[int]:
    """`count` validation pairs spread evenly over the split."""

    return sorted({round(i * (n_pairs - 1) / max(count - 1, 1)) for i in range(min(count, n_pairs))})


def example_translations(model: torch.nn.Module, data: Prepared, cfg: Config,
                         device: torch.device) -> list[dict[str, str]]:
    """train.examples validation sentences with their references and the model's greedy translations."""
    split = data.splits["val"]
    chosen = example_indices(len(split), cfg.train.examples)
    if not chosen:
        return []
    model.eval()
    translator = Translator(TorchEngine(model, device, cfg.train.precision), data.tokenizer,
                            replace(cfg.decode, beam=1, n_best=1), cfg.data.lowercase, cfg=cfg)
    sources = [split.src_raw[i] for i in chosen]
    hypotheses = translator.translate(sources, split_sentences="off")
    return [{"source": source, "reference": split.tgt_raw[i], "hypothesis": hypothesis}
            for i, source, hypothesis in zip(chosen, sources, hypotheses)]
