"""Greedy, beam and ensemble search over batches of ids, written against `nmt.models.base.Seq2Seq` only.

Lengths: a sentence with `n` real source tokens gets at most `floor(a * n + b)` output tokens before EOS;
at that step EOS is forced (it keeps the model's own EOS log-probability). Sentences that finish leave the
active batch (`reorder_state` to the remaining rows), so a batch costs what its unfinished sentences cost. Rows
stay grouped by sentence, as `nmt.models.base` describes, so a model keeps what depends on the source alone
once per sentence.

Beam search keeps, per sentence, the `beam` best finished hypotheses by score = log_prob / lp, with the GNMT
penalty lp = ((5 + length) / 6) ** alpha, where length counts the scored tokens (EOS included). Each step takes
the best 2 * beam expansions of the sentence by summed log-probability (taken from each row's best 2 * beam tokens,
which hold them all); the EOS ones among the first `beam` are finished, the best `beam` non-EOS ones continue. The
first step runs one row per sentence (its `beam` rows would all read BOS) and grows to `beam` rows afterwards.
A sentence is done at its maximum length, or by the stopping rule:
- `finished` (the default, as in CTranslate2, fairseq and Hugging Face): once `beam` hypotheses have finished.
  The search never looks at alpha, which only ranks the finished hypotheses.
- `bound`: once it holds `beam` finished hypotheses and the best active beam's score, normalised at its current
  length, is no better than the worst of them (exact for alpha <= 0, where extending a hypothesis never raises its
  score; a heuristic for alpha > 0 that keeps searching while a longer hypothesis might still win, so at a large
  alpha it goes on to long outputs, which it then prefers).
Both keep beam 1 identical to greedy for every alpha.

Every hypothesis carries the same score in both searches: its summed log-probability (EOS included) divided by
that penalty, so beam 1 gives greedy's tokens and scores. An `Ensemble` of models is itself a `Seq2Seq`, so
neither search knows whether it decodes one model or several.

Call `model.eval()` before decoding; the search runs under `torch.inference_mode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from nmt.config import STOP_RULES, DecodeConfig
from nmt.models.base import Memory, Seq2Seq, State

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    """One translation: target ids without BOS/EOS, its ranking score and its summed log-probability."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, real source length), last row for EOS


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; `length` counts the scored tokens, EOS included."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src_mask: torch.Tensor, max_len_a: float, max_len_b: float,
                max_positions: int | None = None) -> torch.Tensor:
    """Per-sentence cap on output tokens before EOS: floor(a * real source length + b), at least 0 and at most
    what `max_positions` covers (BOS and the outputs before EOS take one position each)."""
    real = src_mask.sum(dim=1).double()  # (B,)
    most = 2**31 - 1 if max_positions is None else max_positions - 1
    return (real * max_len_a + float(max_len_b)).floor().clamp(0, most).long()  # (B,)


def _attention(history: torch.Tensor, row: int, src_mask: torch.Tensor) -> torch.Tensor:
    """The cross-attention rows of one hypothesis, restricted to its sentence's real source tokens, on the CPU
    (results leave the device: plots and statistics read them with numpy)."""
    return history[row][:, src_mask].cpu()  # (T, S_real)


@torch.inference_mode()
def greedy_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig, *,
                  return_attention: bool = False) -> list[Hypothesis]:
    """Most probable next token at each step; one hypothesis per sentence, scored as in beam search. Reads
    `cfg`'s length limits and penalty (`cfg.alpha`); its beam, n_best and stop do not apply."""
    length_penalty = cfg.alpha
    batch, device = src.size(0), src.device
    state = model.init_state(model.encode(src, src_mask), src_mask)
    active = torch.arange(batch, device=device)  # (n,) sentence of each active row
    limit = max_lengths(src_mask, cfg.max_len_a, cfg.max_len_b, model.max_positions)  # (n,)
    log_prob = torch.zeros(batch, device=device)  # (n,)
    prev = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)  # (n,)
    history = torch.empty(batch, 0, dtype=torch.long, device=device)  # (n, t)
    attn_history = torch.empty(batch, 0, src.size(1), device=device)  # (n, t, S)
    results: dict[int, Hypothesis] = {}
    step = 0
    while active.numel():
        log_probs, state = model.step(prev, state)
        log_probs = log_probs.float()  # (n, V)
        token = log_probs.argmax(dim=-1).masked_fill(limit <= step, model.eos_id)  # (n,)
        log_prob = log_prob + log_probs.gather(1, token[:, None]).squeeze(1)  # (n,)
        if return_attention:
            attn_history = torch.cat([attn_history, state.attention.float()[:, None]], dim=1)  # (n, t+1, S)
        done = token == model.eos_id  # (n,)
        if done.any():
            rows = done.nonzero().squeeze(1)
            for row, sent, score in zip(rows.tolist(), active[rows].tolist(), log_prob[rows].tolist(), strict=True):
                attn = _attention(attn_history, row, src_mask[sent]) if return_attention else None
                tokens = history[row].tolist()
                results[sent] = Hypothesis(tokens, score / gnmt_penalty(len(tokens) + 1, length_penalty), score, attn)
            keep = (~done).nonzero().squeeze(1)  # (n',)
            state = model.reorder_state(state, keep[:, None])  # one row per sentence
            active, limit, log_prob, token = active[keep], limit[keep], log_prob[keep], token[keep]
            history, attn_history = history[keep], attn_history[keep]
        history = torch.cat([history, token[:, None]], dim=1)  # (n, t+1)
        prev = token
        step += 1
    return [results[sent] for sent in range(batch)]


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig, *,
                return_attention: bool = False) -> list[list[Hypothesis]]:
    """Batched beam search (B * cfg.beam rows) at penalty `cfg.alpha` with the stopping rule `cfg.stop` ("finished"
    or "bound"); returns `cfg.n_best` hypotheses per sentence, best first.

    Fewer come back only when the model gives fewer than `n_best` finite-probability candidates.
    """
    beam, n_best, stop, length_penalty = cfg.beam, cfg.n_best, cfg.stop, cfg.alpha
    if not 1 <= n_best <= beam:
        raise ValueError(f"n_best ({n_best}) must be between 1 and beam ({beam})")
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {', '.join(STOP_RULES)}, not {stop!r}")
    k, eos = beam, model.eos_id
    batch, device = src.size(0), src.device
    state = model.init_state(model.encode(src, src_mask), src_mask)
    width = 1  # rows per active sentence: one (BOS) at the first step, `beam` from then on
    active = torch.arange(batch, device=device)  # (n,) sentence of each active group of rows
    limit = max_lengths(src_mask, cfg.max_len_a, cfg.max_len_b, model.max_positions)  # (n,)
    worst = torch.full((batch,), NEG_INF, device=device)  # (n,) score of the k-th finished, -inf until k exist
    scores = torch.zeros(batch, 1, device=device)  # (n, width) summed log-probs of the active beams
    prev = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)  # (n*width,)
    history = torch.empty(batch, 0, dtype=torch.long, device=device)  # (n*width, t)
    attn_history = torch.empty(batch, 0, src.size(1), device=device)  # (n*width, t, S)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    step = 0
    while active.numel():
        n = active.numel()
        log_probs, state = model.step(prev, state)
        log_probs = log_probs.float()  # (n*width, V)
        vocab = log_probs.size(-1)
        at_limit = (limit <= step).repeat_interleave(width)  # (n*width,)
        if at_limit.any():
            only_eos = torch.full_like(log_probs, NEG_INF)  # (n*width, V)
            only_eos[:, eos] = log_probs[:, eos]
            log_probs = torch.where(at_limit[:, None], only_eos, log_probs)  # (n*width, V)
        if return_attention:
            attn_history = torch.cat([attn_history, state.attention.float()[:, None]], dim=1)  # (n*width, t+1, S)
        # The best 2K expansions of each row, then of each sentence: no (n, width * V) sum is formed.
        row_scores, row_tokens = log_probs.topk(min(2 * k, vocab), dim=1)  # (n*width, C)
        per_row = row_scores.size(1)
        candidates = (scores.view(-1, 1) + row_scores).view(n, width * per_row)  # (n, width*C)
        top_scores, top_ids = candidates.topk(min(2 * k, width * per_row), dim=1)  # (n, 2K)
        top_rows = top_ids // per_row + torch.arange(0, n * width, width, device=device)[:, None]  # (n, 2K)
        picked = (top_rows * per_row + top_ids % per_row).view(-1)  # (n*2K,) flat positions in row_tokens
        top_tokens = row_tokens.view(-1).gather(0, picked).view_as(top_ids)  # (n, 2K)
        is_eos = top_tokens == eos  # (n, 2K)
        normed = top_scores / gnmt_penalty(step + 1, length_penalty)  # (n, 2K) every candidate has step+1 tokens
        new_done = is_eos[:, :k] & top_scores[:, :k].isfinite()  # (n, <=K)
        if new_done.any():
            groups, ranks = new_done.nonzero(as_tuple=True)
            columns = [groups, active[groups], top_rows[groups, ranks], top_scores[groups, ranks],
                       normed[groups, ranks]]
            for group, sent, row, raw, score in zip(*(c.tolist() for c in columns), strict=True):
                kept = finished[sent]
                if len(kept) == k and score <= kept[-1].score:
                    continue
                attn = _attention(attn_history, row, src_mask[sent]) if return_attention else None
                kept.append(Hypothesis(history[row].tolist(), score, raw, attn))
                kept.sort(key=lambda h: -h.score)
                del kept[k:]
                if len(kept) == k:
                    worst[group] = kept[-1].score
        alive_scores, pick = top_scores.masked_fill(is_eos, NEG_INF).topk(min(k, top_ids.size(1)), dim=1)  # (n, <=K)
        if pick.size(1) < k:  # fewer candidates than beams (a vocabulary under K): the missing beams start dead
            missing = k - pick.size(1)
            alive_scores = torch.cat([alive_scores, alive_scores.new_full((n, missing), NEG_INF)], dim=1)  # (n, K)
            pick = torch.cat([pick, pick.new_zeros(n, missing)], dim=1)  # (n, K)
        if stop == "bound":
            best_alive = alive_scores[:, 0] / gnmt_penalty(step + 1, length_penalty)  # (n,) at its current length
            done = (worst >= best_alive) | (limit <= step)  # (n,)
        else:
            done = (worst > NEG_INF) | (limit <= step)  # (n,) k finished: worst is the k-th's (finite) score
        keep = (~done).nonzero().squeeze(1)  # (n',)
        groups = top_rows.gather(1, pick)[keep]  # (n', K) the rows each kept sentence's beams continue
        rows = groups.view(-1)  # (n'*K,)
        prev = top_tokens.gather(1, pick)[keep].view(-1)  # (n'*K,)
        state = model.reorder_state(state, groups)
        history = torch.cat([history[rows], prev[:, None]], dim=1)  # (n'*K, t+1)
        attn_history = attn_history[rows]
        scores, active, limit, worst, width = alive_scores[keep], active[keep], limit[keep], worst[keep], k
        step += 1
    return [kept[:n_best] for kept in finished]


def decode_batch(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig, *,
                 return_attention: bool = False) -> list[list[Hypothesis]]:
    """Greedy search when `cfg.beam == 1` (one-element lists), beam search otherwise; `auto` length penalties
    decode at `cfg.alpha`."""
    if cfg.beam == 1:
        return [[h] for h in greedy_search(model, src, src_mask, cfg, return_attention=return_attention)]
    return beam_search(model, src, src_mask, cfg, return_attention=return_attention)


@torch.inference_mode()
def forced_log_probs(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                     tgt_out: torch.Tensor) -> torch.Tensor:
    """(B, T) log-probability of each `tgt_out` token after reading the `tgt_in` prefix (BOS first), step by step
    as the searches read them, so an ensemble scores with its members' mean; 0 where `tgt_out` is padding."""
    state = model.init_state(model.encode(src, src_mask), src_mask)
    columns = []
    for t in range(tgt_in.size(1)):
        log_probs, state = model.step(tgt_in[:, t], state)
        columns.append(log_probs.float().gather(1, tgt_out[:, t:t + 1]).squeeze(1))  # (B,)
    return torch.stack(columns, dim=1).masked_fill(tgt_out == model.pad_id, 0.0)  # (B, T)


@dataclass
class EnsembleState(State):
    """Each member's own state."""

    members: list[State]


class Ensemble(Seq2Seq):
    """Several models decoding as one: each keeps its own state, the step's log-probabilities are their mean.

    The members may be of any architecture; they must share the special ids and the target vocabulary size
    (the caller checks that they share the vocabulary itself).
    """

    def __init__(self, members: Sequence[Seq2Seq]) -> None:
        super().__init__()
        if len(members) < 2:
            raise ValueError("an ensemble needs at least two models")
        first = members[0]
        for member in members[1:]:
            if (member.pad_id, member.bos_id, member.eos_id) != (first.pad_id, first.bos_id, first.eos_id):
                raise ValueError("ensemble members use different special token ids")
        self.members = nn.ModuleList(members)
        self.pad_id, self.bos_id, self.eos_id = first.pad_id, first.bos_id, first.eos_id
        limits = [m.max_positions for m in members if m.max_positions is not None]
        self.max_positions = min(limits) if limits else None

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        return {"members": [member.encode(src, src_mask) for member in self.members]}

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> EnsembleState:
        return EnsembleState([member.init_state(mem, src_mask)
                              for member, mem in zip(self.members, memory["members"], strict=True)])

    def step(self, prev_tokens: torch.Tensor, state: EnsembleState) -> tuple[torch.Tensor, EnsembleState]:
        outputs = [member.step(prev_tokens, sub) for member, sub in zip(self.members, state.members, strict=True)]
        log_probs = torch.stack([lp.float() for lp, _ in outputs]).mean(0)  # (B, V)
        states = [sub for _, sub in outputs]
        attention = torch.stack([sub.attention.float() for sub in states]).mean(0)  # (B, S)
        return log_probs, EnsembleState(states, width=state.width, attention=attention)

    def reorder_state(self, state: EnsembleState, indices: torch.Tensor) -> EnsembleState:
        pairs = zip(self.members, state.members, strict=True)
        return EnsembleState([member.reorder_state(sub, indices) for member, sub in pairs], width=indices.size(1))
