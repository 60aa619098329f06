"""The trainer: one update, validation, checkpoints, stopping rules, exact resume and DDP."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sacrebleu
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from nmt.checkpoint import Bundle, TrainingState, average_checkpoints, load_for_resume, save_bundle
from nmt.config import Config, DecodeConfig, save_config
from nmt.data import Batch, Prepared, TokenBatchSampler, collate
from nmt.decode import detokenize, translate_ids
from nmt.loss import label_smoothed_loss
from nmt.models import build_model, count_parameters
from nmt.optim import Plateau, build_optimizer, learning_rate, set_lr
from nmt.signals import stop_signal
from nmt.utils import autocast, rng_state, seed_everything, set_rng_state

log = logging.getLogger("nmt.train")


class TrainingError(Exception):
    """A run that cannot go on (for example too many non-finite updates in a row)."""


@dataclass
class Progress:
    """Everything about the run's position that a resume must restore."""

    step: int = 0
    elapsed: float = 0.0
    skipped: int = 0
    nonfinite_in_row: int = 0
    bad_validations: int = 0
    best: list[dict] = field(default_factory=list)  # [{"score", "step", "path"}], best first


def _dist_info() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Trainer:
    """Trains one model on prepared data; rank 0 writes everything under the run folder."""

    def __init__(self, cfg: Config, data: Prepared, device: torch.device) -> None:
        self.cfg, self.data, self.device = cfg, data, device
        self.rank, self.world = _dist_info()
        self.run_dir = cfg.run_dir
        self.ckpt_dir = self.run_dir / "checkpoints"
        tcfg = cfg.train
        seed_everything(tcfg.seed)
        self.vocab = data.tokenizer.vocab
        self.model = build_model(cfg.model, self.vocab).to(device)
        self.n_params = count_parameters(self.model)
        self.net: torch.nn.Module = self.model
        if self.world > 1:
            self.net = DistributedDataParallel(self.model, device_ids=[device.index] if device.type == "cuda" else None)
        if tcfg.compile:
            self.net = torch.compile(self.net)
        self.optimizer = build_optimizer(self.model, tcfg)
        self.scaler = torch.amp.GradScaler(device.type, enabled=tcfg.precision == "fp16")
        higher = tcfg.early_stop_metric == "bleu"
        self.plateau = Plateau(tcfg.plateau_factor, tcfg.plateau_patience, tcfg.min_lr, higher)
        train = data.splits["train"]
        self.sampler = TokenBatchSampler(train.src_lens, train.tgt_lens, tcfg.batch_tokens, shuffle=True,
                                         seed=tcfg.seed, num_replicas=self.world, rank=self.rank)
        self.progress = Progress()
        self.validated_step = -1
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.tb = None

    # ----------------------------------------------------------------- state
    def bundle(self, training: bool = True) -> Bundle:
        """The run as a checkpoint bundle, with the resumable training state unless `training` is False."""
        state = None
        if training:
            state = TrainingState(self.optimizer.state_dict(), self.scaler.state_dict(), self.plateau.state_dict(),
                                  self.sampler.state_dict(), rng_state())
        return Bundle.build(self.cfg, self.data.tokenizer, self.model, vars(self.progress).copy(), state)

    def resume(self, path: Path) -> None:
        """Restore the state saved by `bundle`, refusing an incompatible checkpoint."""
        bundle = load_for_resume(path, self.cfg, self.data.tokenizer.identity)
        state = bundle.training
        self.model.load_state_dict(bundle.model)
        self.optimizer.load_state_dict(state.optimizer)
        self.scaler.load_state_dict(state.scaler)
        self.plateau.load_state_dict(state.plateau)
        self.sampler.load_state_dict(state.sampler)
        self.progress = Progress(**bundle.progress)
        set_rng_state(state.rng)
        self._truncate_metrics(self.progress.step)
        log.info("resumed from %s at step %d (epoch %d)", path, self.progress.step, self.sampler.epoch)

    def _truncate_metrics(self, step: int) -> None:
        """Drop log lines written after the checkpoint, so the log matches the resumed run."""
        if self.rank or not self.metrics_path.exists():
            return
        lines = [ln for ln in self.metrics_path.read_text(encoding="utf-8").splitlines()
                 if ln.strip() and json.loads(ln).get("step", 0) <= step]
        self.metrics_path.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")

    # ----------------------------------------------------------------- logging
    def _record(self, entry: dict[str, Any]) -> None:
        if self.rank:
            return
        with self.metrics_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
        if self.tb is not None:
            for key, value in entry.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tb.add_scalar(f"{entry['type']}/{key}", value, entry["step"])

    def _open_tensorboard(self) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return
        self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))

    # ----------------------------------------------------------------- one update
    def _update(self, batches: list[Batch]) -> dict[str, float] | None:
        """Forward/backward over `batches` (gradient accumulation) and one optimizer step.

        Returns the update's statistics, or None when it was skipped for a non-finite loss or gradient.
        """
        tcfg = self.cfg.train
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        tokens = torch.tensor([float(sum(b.n_tgt_tokens for b in batches))])
        if self.world > 1:
            dist.all_reduce(tokens)
        # DDP averages gradients over ranks, so scale by the world size to normalise by the global token count.
        norm = self.world / tokens.item()
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            sync = i == len(batches) - 1 or self.world == 1
            with (nullcontext() if sync else self.net.no_sync()), autocast(self.device, tcfg.precision):
                logits = self.net(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V)
                loss, nll, _ = label_smoothed_loss(logits, batch.tgt_out, tcfg.label_smoothing, self.vocab.pad_id)
            self.scaler.scale(loss * norm).backward()
            loss_sum += loss.item()
            nll_sum += nll.item()
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, tcfg.clip_norm if tcfg.clip_norm > 0 else math.inf)
        finite = torch.tensor([float(math.isfinite(loss_sum) and bool(torch.isfinite(grad_norm)))])
        if self.world > 1:
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)
        if not finite.item():
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.update()
            return None
        lr = learning_rate(self.progress.step + 1, tcfg, self.cfg.model.d_model, self.plateau)
        set_lr(self.optimizer, lr)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        stats = torch.tensor([loss_sum, nll_sum])
        if self.world > 1:
            dist.all_reduce(stats)
        return {"loss": stats[0].item() / tokens.item(), "nll": stats[1].item() / tokens.item(),
                "lr": lr, "grad_norm": float(grad_norm)}

    # ----------------------------------------------------------------- validation
    def validate(self) -> dict[str, float]:
        """Validation loss, perplexity and greedy BLEU (rank 0 only)."""
        split = self.data.splits["val"]
        self.model.eval()
        total = nll_sum = 0.0
        sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, self.cfg.train.batch_tokens, shuffle=False)
        with torch.inference_mode(), autocast(self.device, self.cfg.train.precision):
            for indices in sampler:
                batch = collate([(split.src[i], split.tgt[i]) for i in indices], self.vocab.pad_id).to(self.device)
                logits = self.model(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V)
                _, nll, n = label_smoothed_loss(logits, batch.tgt_out, 0.0, self.vocab.pad_id)
                nll_sum += nll.item()
                total += n
        loss = nll_sum / max(total, 1)
        result = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
        if self.cfg.train.eval_bleu:
            greedy = DecodeConfig(beam=1, max_len_a=self.cfg.decode.max_len_a, max_len_b=self.cfg.decode.max_len_b,
                                  batch_tokens=self.cfg.decode.batch_tokens)
            nbest = translate_ids(self.model, split.src, greedy, self.device, self.cfg.train.precision)
            result["bleu"] = sacrebleu.corpus_bleu(detokenize(self.data.tokenizer, nbest), [split.tgt_raw]).score
        return result

    def _metric(self, result: dict[str, float]) -> float:
        """The early-stopping score, higher is better."""
        if self.cfg.train.early_stop_metric == "bleu" and "bleu" in result:
            return result["bleu"]
        return -result["loss"]

    def _after_validation(self, result: dict[str, float]) -> bool:
        """Keep best checkpoints, update plateau and patience; returns True when training should stop."""
        tcfg, prog = self.cfg.train, self.progress
        score = self._metric(result)
        self.plateau.observe(score, tcfg.lr)
        improved = not prog.best or score > prog.best[0]["score"]
        prog.bad_validations = 0 if improved else prog.bad_validations + 1
        if not prog.best or len(prog.best) < tcfg.keep_best or score > prog.best[-1]["score"]:
            path = self.ckpt_dir / f"step_{prog.step}.pt"
            prog.best.append({"score": score, "step": prog.step, "path": path.name})
            prog.best.sort(key=lambda b: -b["score"])
            for old in prog.best[tcfg.keep_best:]:
                (self.ckpt_dir / old["path"]).unlink(missing_ok=True)
            del prog.best[tcfg.keep_best:]
            save_bundle(self.bundle(training=False), path)
        if improved:
            save_bundle(self.bundle(training=False), self.ckpt_dir / "best.pt")
        return tcfg.patience > 0 and prog.bad_validations >= tcfg.patience

    # ----------------------------------------------------------------- the loop
    def _batches(self) -> Iterator[Batch]:
        """Batches until the epoch limit; the sampler's state says where the run is."""
        train = self.data.splits["train"]
        while not self._out_of_epochs():
            for indices in self.sampler:
                yield collate([(train.src[i], train.tgt[i]) for i in indices], self.vocab.pad_id).to(self.device)

    def _out_of_epochs(self) -> bool:
        return 0 < self.cfg.train.max_epochs <= self.sampler.epoch

    def _should_stop_by_budget(self, start: float) -> bool:
        tcfg, prog = self.cfg.train, self.progress
        elapsed = prog.elapsed + time.monotonic() - start
        return (0 < tcfg.max_steps <= prog.step) or (tcfg.max_minutes > 0 and elapsed >= tcfg.max_minutes * 60)

    def _broadcast_stop(self, stop: bool) -> bool:
        if self.world == 1:
            return stop
        flag = torch.tensor([float(stop)])
        dist.broadcast(flag, src=0)
        return bool(flag.item())

    def fit(self) -> Progress:
        """Train until a stop condition; writes checkpoints and metrics under the run folder."""
        tcfg, prog = self.cfg.train, self.progress
        if self.rank == 0:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            if prog.step == 0:  # a fresh start (or --restart) leaves nothing of an earlier run behind
                self._truncate_metrics(0)
                for stale in self.ckpt_dir.glob("*.pt"):
                    stale.unlink()
            save_config(self.cfg, self.run_dir / "config.yaml")
            self._open_tensorboard()
        if self._out_of_epochs() or self._should_stop_by_budget(time.monotonic()):
            return prog
        start = time.monotonic()
        window_start, window_tokens, window_src = time.monotonic(), 0, 0
        bar = tqdm(total=tcfg.max_steps or None, initial=prog.step, dynamic_ncols=True, desc=self.cfg.name,
                   unit="step", disable=self.rank != 0 or not sys.stderr.isatty())
        stream = self._batches()
        stop = False
        while not stop:
            group = [b for _, b in zip(range(tcfg.accumulate), stream)]
            if not group:
                break
            stats = self._update(group)
            window_tokens += sum(b.n_tgt_tokens for b in group)
            window_src += sum(b.n_src_tokens for b in group)
            if stats is None:
                prog.skipped += 1
                prog.nonfinite_in_row += 1
                log.warning("skipped an update with a non-finite loss or gradient (%d in a row)",
                            prog.nonfinite_in_row)
                if prog.nonfinite_in_row >= tcfg.max_nonfinite:
                    self._save_last()
                    raise TrainingError(f"{prog.nonfinite_in_row} non-finite updates in a row at step {prog.step}; "
                                        f"stopped (last good state saved in {self.ckpt_dir / 'last.pt'}). "
                                        "Lower train.lr, raise train.warmup or use precision bf16/fp32.")
                continue
            prog.nonfinite_in_row = 0
            prog.step += 1
            bar.update(1)
            if prog.step % tcfg.log_every == 0:
                seconds = max(time.monotonic() - window_start, 1e-9)
                entry = {"type": "train", "step": prog.step, "epoch": self.sampler.epoch, **stats,
                         "ppl": math.exp(min(stats["nll"], 50.0)), "tgt_tok_s": self.world * window_tokens / seconds,
                         "src_tok_s": self.world * window_src / seconds, "skipped": prog.skipped,
                         "elapsed": prog.elapsed + time.monotonic() - start}
                self._record(entry)
                log.info("step %d epoch %d loss %.3f lr %.2e %.0f tgt tok/s", prog.step, self.sampler.epoch,
                         stats["loss"], stats["lr"], entry["tgt_tok_s"])
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}",
                                tok_s=f"{entry['tgt_tok_s']:.0f}")
                window_start, window_tokens, window_src = time.monotonic(), 0, 0
            if stop_signal():  # SIGINT/SIGTERM: the update is done; save last.pt below, without validating
                break
            epoch_end = self.sampler.position == 0 and tcfg.eval_every == 0
            stop = self._should_stop_by_budget(start)
            if (tcfg.eval_every and prog.step % tcfg.eval_every == 0) or epoch_end or stop:
                prog.elapsed += time.monotonic() - start
                start = time.monotonic()
                stop = self._validate_and_save(stop)
        bar.close()
        prog.elapsed += time.monotonic() - start
        if stop_signal():
            self._save_last()
        elif self.validated_step != prog.step:  # every rank: the stop decision is broadcast
            self._validate_and_save(True)
        if self.tb is not None:
            self.tb.close()
        return prog

    def _validate_and_save(self, stop: bool) -> bool:
        self.validated_step = self.progress.step
        if self.rank == 0:
            result = self.validate()
            entry = {"type": "valid", "step": self.progress.step, "epoch": self.sampler.epoch, **result,
                     "elapsed": self.progress.elapsed}
            self._record(entry)
            log.info("validation at step %d: %s", self.progress.step,
                     ", ".join(f"{k} {v:.3f}" for k, v in result.items()))
            stop = self._after_validation(result) or stop
            self._save_last()
        return self._broadcast_stop(stop)

    def _save_last(self) -> None:
        if self.rank == 0:
            save_bundle(self.bundle(), self.ckpt_dir / "last.pt")

    # ----------------------------------------------------------------- final model
    def final_checkpoint(self) -> Path:
        """The checkpoint to evaluate: best, or the average of the best k when train.average_last is set."""
        best = self.ckpt_dir / "best.pt"
        k = self.cfg.train.average_last
        if k <= 1:
            return best
        paths = [self.ckpt_dir / b["path"] for b in self.progress.best[:k]]
        target = self.ckpt_dir / "averaged.pt"
        save_bundle(average_checkpoints(paths), target)
        return target


def init_distributed(device_name: str) -> torch.device | None:
    """Join the torchrun process group when launched by torchrun; returns this rank's device."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    use_cuda = torch.cuda.is_available() and device_name != "cpu"
    dist.init_process_group("nccl" if use_cuda else "gloo")
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")
