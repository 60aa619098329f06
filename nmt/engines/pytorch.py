"""The PyTorch engine: `nmt.search`'s greedy, sampling or beam search on one model or an ensemble."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from nmt.config import STOP_RULES, DecodeConfig
from nmt.data import collate
from nmt.engines import Abilities
from nmt.kernels import keep_freed_memory
from nmt.models import count_parameters
from nmt.models.base import Seq2Seq
from nmt.models.transformer import Transformer
from nmt.search import (
    Ensemble,
    Hypothesis,
    Suppressing,
    beam_search,
    constrained_beam_search,
    forced_log_probs,
    greedy_search,
    sample_search,
)
from nmt.utils import autocast


def batches_by_tokens(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices, shortest first, in batches whose padded size (with EOS) fits `budget`."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (lengths[i] + 1) * (len(current) + 1) > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def cross_attention_layers(model: Transformer, src: np.ndarray, tokens: Sequence[int]) -> list[torch.Tensor]:
    """Each decoder layer's cross-attention (h, T, S) over `src` while reading `tokens`, teacher-forced."""
    captured: list[torch.Tensor] = []

    def ask(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "need_weights": True}

    def keep(_module: nn.Module, _args: tuple, _kwargs: dict, output: tuple) -> None:
        captured.append(output[1][0].float().cpu())  # (h, T, S)

    hooks = [hook for layer in model.decoder_layers
             for hook in (layer.cross_attn.register_forward_pre_hook(ask, with_kwargs=True),
                          layer.cross_attn.register_forward_hook(keep, with_kwargs=True))]
    device = next(model.parameters()).device
    try:
        batch = collate([(src, np.asarray(tokens, dtype=np.int64))], model.pad_id).to(device)
        with torch.inference_mode():
            model(batch.src, batch.src_mask, batch.tgt_in)
    finally:
        for hook in hooks:
            hook.remove()
    return captured


def batch_seed(seed: int, first: int) -> int:
    """The sampling seed of the batch whose first sentence is `first`: mixed into 32 bits (torch's CPU generator
    keeps no more), so neighbouring seeds and batches draw unrelated samples."""
    return int(np.random.SeedSequence([seed, first]).generate_state(1)[0])


def side_by_side(device: torch.device, batches: int) -> int:
    """Batches decoded at once: one per thread on the CPU (a batch keeps one thread busy), one on a GPU."""
    return min(torch.get_num_threads(), batches) if device.type == "cpu" and batches > 1 else 1


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's CPU thread count set to `count` for the block."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(before)


class TorchEngine:
    """`nmt.search` on a PyTorch model, in length-sorted batches under a token budget."""

    name = "pytorch"
    abilities = Abilities(attention=True, n_best=True, stops=STOP_RULES, devices=("cpu", "cuda"), scores=True,
                          constraints=True, sampling=True)

    def __init__(self, model: Seq2Seq, device: torch.device, precision: str = "fp32") -> None:
        self.model, self.device, self.precision = model, device, precision
        if device.type == "cpu":  # each step's logits reuse freed blocks
            keep_freed_memory()
        self.max_positions = model.max_positions
        self.members = list(model.members) if isinstance(model, Ensemble) else [model]

    @property
    def parameter_count(self) -> int | None:
        return count_parameters(self.model)

    def search(self, sources: Sequence[np.ndarray], cfg: DecodeConfig, return_attention: bool = False,
               constraints: Sequence[Sequence[np.ndarray]] | None = None, *,
               continuations: frozenset[int] = frozenset(),
               never_emit: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
        self.model.eval()
        results: list[list[Hypothesis]] = [[] for _ in sources]
        no_target = np.zeros(0, dtype=np.int64)

        stop = threading.Event()  # on an error, batches not yet begun are skipped

        def search_one_batch(indices: list[int]) -> None:
            if stop.is_set():
                return
            try:
                with torch.inference_mode(), autocast(self.device, self.precision):  # per thread
                    batch = collate([(sources[i], no_target) for i in indices], self.model.pad_id).to(self.device)
                    src, mask = batch.src, batch.src_mask
                    terms = None if constraints is None else [[t.tolist() for t in constraints[i]] for i in indices]
                    model = Suppressing(self.model, never_emit) if never_emit else self.model
                    if terms is not None and any(len(term) for line in terms for term in line):
                        nbest = constrained_beam_search(model, src, mask, cfg, terms,
                                                        return_attention=return_attention, continuations=continuations)
                    elif cfg.sampling:  # seeded per batch, so threads' order does not matter
                        generator = torch.Generator(device=self.device).manual_seed(batch_seed(cfg.seed, indices[0]))
                        nbest = [[hyp] for hyp in sample_search(model, src, mask, cfg, generator=generator,
                                                                return_attention=return_attention)]
                    elif cfg.beam == 1:
                        nbest = [[hyp] for hyp in greedy_search(model, src, mask, cfg,
                                                                return_attention=return_attention)]
                    else:
                        nbest = beam_search(model, src, mask, cfg, return_attention=return_attention)
            except BaseException:
                stop.set()  # before the error reaches the caller
                raise
            for i, hyps in zip(indices, nbest, strict=True):
                results[i] = hyps

        searched = [i for i, ids in enumerate(sources) if len(ids)]
        batches = [[searched[j] for j in batch]
                   for batch in batches_by_tokens([len(sources[i]) for i in searched], cfg.batch_tokens)]
        workers = side_by_side(self.device, len(batches))
        if workers == 1:
            for indices in batches:
                search_one_batch(indices)
            return results
        with torch_threads(torch.get_num_threads() // workers):
            pool = ThreadPoolExecutor(workers, thread_name_prefix="nmt-decode")
            try:  # longest first, so no long batch runs alone
                for future in [pool.submit(search_one_batch, indices) for indices in reversed(batches)]:
                    future.result()
            finally:  # on an error or signal, unstarted batches are dropped
                stop.set()
                pool.shutdown(wait=True, cancel_futures=True)
        return results

    def score(self, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray],
              cfg: DecodeConfig) -> list[np.ndarray]:
        self.model.eval()
        results: list[np.ndarray] = [np.zeros(0, dtype=np.float32) for _ in sources]
        lengths = [max(len(s), len(t)) for s, t in zip(sources, targets, strict=True)]
        for indices in batches_by_tokens(lengths, cfg.batch_tokens):
            with torch.inference_mode(), autocast(self.device, self.precision):
                batch = collate([(sources[i], targets[i]) for i in indices], self.model.pad_id).to(self.device)
                log_probs = forced_log_probs(self.model, batch.src, batch.src_mask, batch.tgt_in, batch.tgt_out)
            for row, i in enumerate(indices):
                results[i] = log_probs[row, :len(targets[i]) + 1].cpu().numpy()  # tokens and EOS
        return results

    def layer_attention(self, src: np.ndarray, tokens: Sequence[int]) -> list[tuple[str, torch.Tensor]]:
        out = []
        for number, member in enumerate(self.members, 1):
            if not isinstance(member, Transformer):
                continue
            prefix = f"model {number} " if len(self.members) > 1 else ""
            out += [(f"{prefix}layer {index}", weights)
                    for index, weights in enumerate(cross_attention_layers(member, src, tokens), 1)]
        return out
