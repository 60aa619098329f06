"""Greedy, sampling, beam, constrained and ensemble search over batches of ids, against `nmt.models.base.Seq2Seq`.

Output is capped at floor(a * source length + b) tokens, then EOS is forced; finished sentences leave the batch.
Scores are log_prob / ((5 + length) / 6) ** alpha (GNMT, length counts EOS), so beam 1 equals greedy. `stop`:
`finished` ends a sentence once `beam` hypotheses finished; `bound` once the best active beam cannot beat the worst
of them (exact for alpha <= 0). Call `model.eval()` first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from nmt.config import STOP_RULES, DecodeConfig
from nmt.constraints import Constraints, Standing
from nmt.models.base import Memory, Seq2Seq, State

NEG_INF = float("-inf")
BLOCK = 64  # vocabulary entries per block in `row_argmax` and `row_topk`


@dataclass
class Hypothesis:
    """One translation: target ids without BOS/EOS, ranking score and summed log-probability."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, real source length), last row for EOS
    unmet: int = 0  # constraints lacking (only when ended by the length cap)


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; `length` includes EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src_mask: torch.Tensor, max_len_a: float, max_len_b: float,
                max_positions: int | None = None) -> torch.Tensor:
    """Per-sentence cap on output tokens before EOS: floor(a * source length + b), within `max_positions`."""
    real = src_mask.sum(dim=1).double()  # (B,)
    most = 2**31 - 1 if max_positions is None else max_positions - 1
    return (real * max_len_a + float(max_len_b)).floor().clamp(0, most).long()  # (B,)


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """`x.argmax(dim=1)` of (n, V), faster on the CPU through block maxima; same indices."""
    n, size = x.shape
    blocks = size // BLOCK
    if blocks < 2 or x.device.type != "cpu":
        return x.argmax(dim=1)
    maxima = x[:, :blocks * BLOCK].view(n, blocks, BLOCK).amax(2)  # (n, blocks)
    if size > blocks * BLOCK:
        maxima = torch.cat([maxima, x[:, blocks * BLOCK:].amax(1, keepdim=True)], 1)  # (n, blocks+1) with the tail
    # the tail's window is the last BLOCK entries; those shared with the previous block are below the maximum
    start = (maxima.argmax(1) * BLOCK).clamp_(max=size - BLOCK)  # (n,)
    window = x.gather(1, start[:, None] + torch.arange(BLOCK, device=x.device))  # (n, BLOCK)
    return start + window.argmax(1)


def row_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, dim=1)` of (n, V), on the CPU from the k + 1 blocks with the highest maxima (and the tail); rows
    with ties, -inf or NaN fall back to `topk`."""
    n, size = x.shape
    blocks = size // BLOCK
    if blocks < 2 * (k + 1) or x.device.type != "cpu":
        return x.topk(k, dim=1)
    whole = x[:, :blocks * BLOCK].view(n, blocks, BLOCK)
    chosen = whole.amax(2).topk(k + 1, dim=1).indices  # (n, k+1) blocks
    flat = (chosen + torch.arange(0, n * blocks, blocks, device=x.device)[:, None]).view(-1)  # (n*(k+1),)
    candidates = whole.reshape(n * blocks, BLOCK).index_select(0, flat).view(n, -1)  # (n, (k+1)*BLOCK)
    columns = (chosen[:, :, None] * BLOCK + torch.arange(BLOCK, device=x.device)).view(n, -1)  # (n, (k+1)*BLOCK)
    if size > blocks * BLOCK:  # the tail: always a candidate
        candidates = torch.cat([candidates, x[:, blocks * BLOCK:]], 1)
        columns = torch.cat([columns, torch.arange(blocks * BLOCK, size, device=x.device).expand(n, -1)], 1)
    values, picked = candidates.topk(k + 1, dim=1)  # (n, k+1)
    indices = columns.gather(1, picked)  # (n, k+1)
    clear = (values[:, :-1] > values[:, 1:]).all(1)  # (n,)
    values, indices = values[:, :k].contiguous(), indices[:, :k].contiguous()
    if not bool(clear.all()):
        rows = (~clear).nonzero().squeeze(1)
        exact_values, exact_indices = x.index_select(0, rows).topk(k, dim=1)
        values, indices = values.index_copy(0, rows, exact_values), indices.index_copy(0, rows, exact_indices)
    return values, indices


def _attention(history: torch.Tensor, row: int, src_mask: torch.Tensor) -> torch.Tensor:
    """One hypothesis's cross-attention over its real source tokens, on the CPU."""
    return history[row][:, src_mask].cpu()  # (T, S_real)


@torch.inference_mode()
def greedy_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig, *,
                  return_attention: bool = False) -> list[Hypothesis]:
    """Most probable token at each step; one hypothesis per sentence, scored as in beam search."""
    return _token_by_token(model, src, src_mask, cfg, row_argmax, return_attention)


def _token_by_token(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig,
                    choose: Callable[[torch.Tensor], torch.Tensor], return_attention: bool) -> list[Hypothesis]:
    """Each step, for each sentence, the token `choose` picks from the (n, V) log-probabilities; one hypothesis per
    sentence, scored by the model's log-probabilities as in beam search."""
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
        token = choose(log_probs).masked_fill(limit <= step, model.eos_id)  # (n,)
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


def sampling_distribution(log_probs: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """(n, V) probabilities to draw from: `log_probs` divided by `temperature`, outside the `top_k` most probable
    tokens (0: all) and the nucleus of mass `top_p` zeroed, renormalized."""
    logits = log_probs / temperature  # (n, V)
    if 0 < top_k < logits.size(1):
        kth = logits.topk(top_k, dim=1).values[:, -1:]  # (n, 1)
        logits = logits.masked_fill(logits < kth, NEG_INF)  # (n, V)
    if top_p < 1.0:
        ordered, order = logits.sort(dim=1, descending=True)  # (n, V)
        probs = ordered.softmax(dim=1)  # (n, V)
        outside = probs.cumsum(dim=1) - probs >= top_p  # (n, V) the mass before a token already reaches top_p
        logits = logits.scatter(1, order, ordered.masked_fill(outside, NEG_INF))  # (n, V)
    return logits.softmax(dim=1)  # (n, V)


@torch.inference_mode()
def sample_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig, *,
                  generator: torch.Generator | None = None, return_attention: bool = False) -> list[Hypothesis]:
    """One token per step drawn from `sampling_distribution` (with `generator`, else one seeded by `cfg.seed`);
    one hypothesis per sentence, scored by the model's own log-probabilities as in greedy search."""
    if generator is None:
        generator = torch.Generator(device=src.device).manual_seed(cfg.seed)

    def draw(log_probs: torch.Tensor) -> torch.Tensor:
        probs = sampling_distribution(log_probs, cfg.temperature, cfg.top_k, cfg.top_p)  # (n, V)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (n,)

    return _token_by_token(model, src, src_mask, cfg, draw, return_attention)


def _expand(log_probs: torch.Tensor, scores: torch.Tensor, at_limit: torch.Tensor, eos: int,
            k: int) -> tuple[torch.Tensor, ...]:
    """Each sentence's best 2K expansions (only EOS in rows `at_limit`), via each row's best 2K to avoid an
    (n, width * V) sum. Returns masked log-probs, row tokens (n*width, C), candidate scores, rows, tokens (n, 2K)."""
    n, width = scores.shape
    if at_limit.any():
        only_eos = torch.full_like(log_probs, NEG_INF)  # (n*width, V)
        only_eos[:, eos] = log_probs[:, eos]
        log_probs = torch.where(at_limit[:, None], only_eos, log_probs)  # (n*width, V)
    row_scores, row_tokens = row_topk(log_probs, min(2 * k, log_probs.size(-1)))  # (n*width, C)
    per_row = row_scores.size(1)
    candidates = (scores.view(-1, 1) + row_scores).view(n, width * per_row)  # (n, width*C)
    top_scores, top_ids = candidates.topk(min(2 * k, width * per_row), dim=1)  # (n, 2K)
    top_rows = top_ids // per_row + torch.arange(0, n * width, width, device=scores.device)[:, None]  # (n, 2K)
    picked = (top_rows * per_row + top_ids % per_row).view(-1)  # (n*2K,) flat positions in row_tokens
    top_tokens = row_tokens.view(-1).gather(0, picked).view_as(top_ids)  # (n, 2K)
    return log_probs, row_tokens, top_scores, top_rows, top_tokens


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig, *,
                return_attention: bool = False) -> list[list[Hypothesis]]:
    """Batched beam search; `cfg.n_best` hypotheses per sentence, best first (fewer only if fewer are finite)."""
    beam, n_best, stop, length_penalty = cfg.beam, cfg.n_best, cfg.stop, cfg.alpha
    if not 1 <= n_best <= beam:
        raise ValueError(f"n_best ({n_best}) must be between 1 and beam ({beam})")
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {', '.join(STOP_RULES)}, not {stop!r}")
    k, eos = beam, model.eos_id
    batch, device = src.size(0), src.device
    state = model.init_state(model.encode(src, src_mask), src_mask)
    width = 1  # rows per active sentence: 1 at the first step, then `beam`
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
        at_limit = (limit <= step).repeat_interleave(width)  # (n*width,)
        if return_attention:
            attn_history = torch.cat([attn_history, state.attention.float()[:, None]], dim=1)  # (n*width, t+1, S)
        log_probs, row_tokens, top_scores, top_rows, top_tokens = _expand(log_probs, scores, at_limit, eos, k)
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
        alive_scores, pick = top_scores.masked_fill(is_eos, NEG_INF).topk(min(k, top_scores.size(1)), dim=1)  # (n, <=K)
        if pick.size(1) < k:  # fewer candidates than beams: the missing beams start dead
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


@torch.inference_mode()
def constrained_beam_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, cfg: DecodeConfig,
                            constraints: Sequence[Sequence[Sequence[int]]], *, return_attention: bool = False,
                            continuations: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
    """Beam search whose outputs contain their sentence's target terms (`constraints`: per sentence, terms as ids),
    by dynamic beam allocation (Hu et al. 2019).

    EOS waits until every term is met, except at the length cap, where the hypothesis gets `unmet` and ranks after
    complete ones. No token of `continuations` may follow a term, so it stands as a whole word.
    """
    beam, n_best, stop, length_penalty = cfg.beam, cfg.n_best, cfg.stop, cfg.alpha
    if not 1 <= n_best <= beam:
        raise ValueError(f"n_best ({n_best}) must be between 1 and beam ({beam})")
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {', '.join(STOP_RULES)}, not {stop!r}")
    if len(constraints) != src.size(0):
        raise ValueError(f"{len(constraints)} constraint lists for {src.size(0)} sentences")
    k, eos = beam, model.eos_id
    batch, device = src.size(0), src.device
    state = model.init_state(model.encode(src, src_mask), src_mask)
    width = 1  # rows per active sentence: 1 at the first step, then `beam`
    active = list(range(batch))  # sentence of each active group of rows
    limit = max_lengths(src_mask, cfg.max_len_a, cfg.max_len_b, model.max_positions)  # (n,)
    limits = limit.tolist()
    worst = [NEG_INF] * batch  # per active sentence: score of the k-th finished, -inf until k exist
    scores = torch.zeros(batch, 1, device=device)  # (n, width) summed log-probs of the active beams
    standings: list[Standing] = [Constraints.of(terms).start() for terms in constraints]  # per row
    prev = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)  # (n*width,)
    history = torch.empty(batch, 0, dtype=torch.long, device=device)  # (n*width, t)
    attn_history = torch.empty(batch, 0, src.size(1), device=device)  # (n*width, t, S)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    step = 0
    word_goes_on = None  # (V,) True at the tokens of `continuations`
    while active:
        n = len(active)
        log_probs, state = model.step(prev, state)
        log_probs = log_probs.float()  # (n*width, V)
        at_limit = (limit <= step).repeat_interleave(width)  # (n*width,)
        lacking = torch.tensor([p.unmet > 0 for p in standings], device=device) & ~at_limit  # (n*width,)
        if lacking.any():  # no EOS while a term is unmet
            eos_column = torch.zeros_like(log_probs, dtype=torch.bool)  # (n*width, V)
            eos_column[:, eos] = lacking
            log_probs = log_probs.masked_fill(eos_column, NEG_INF)  # (n*width, V)
        ended_rows = [p.completed for p in standings] if continuations else []  # a term just ended here
        if any(ended_rows):
            if word_goes_on is None:
                word_goes_on = torch.zeros(log_probs.size(1), dtype=torch.bool, device=device)  # (V,)
                word_goes_on[sorted(continuations)] = True
            ended = torch.tensor(ended_rows, device=device)  # (n*width,)
            log_probs = log_probs.masked_fill(ended[:, None] & word_goes_on, NEG_INF)  # (n*width, V)
        if return_attention:
            attn_history = torch.cat([attn_history, state.attention.float()[:, None]], dim=1)  # (n*width, t+1, S)
        log_probs, row_tokens, top_scores, top_rows, top_tokens = _expand(log_probs, scores, at_limit, eos, k)
        # sentences with terms also consider each row's best token and the tokens its unmet terms want
        extra = [(row, token) for row, p in enumerate(standings) if p.unmet for token in p.wanted()]
        extra += [(row, token) for row, token in enumerate(row_tokens[:, 0].tolist())
                  if standings[row].constraints.terms]
        extra_rows = torch.tensor([row for row, _ in extra], dtype=torch.long, device=device)  # (E,)
        extra_tokens = torch.tensor([token for _, token in extra], dtype=torch.long, device=device)  # (E,)
        extra_scores = scores.view(-1)[extra_rows] + log_probs[extra_rows, extra_tokens]  # (E,)
        penalty = gnmt_penalty(step + 1, length_penalty)  # every candidate has step+1 tokens
        # (row, token) -> (summed log-prob, score), divided on the device as in `beam_search`
        by_group: list[dict[tuple[int, int], tuple[float, float]]] = [{} for _ in range(n)]
        for group, (rows, tokens, values, normed) in enumerate(zip(
                top_rows.tolist(), top_tokens.tolist(), top_scores.tolist(), (top_scores / penalty).tolist(),
                strict=True)):
            by_group[group].update(zip(zip(rows, tokens, strict=True), zip(values, normed, strict=True), strict=True))
        for (row, token), value, normed in zip(extra, extra_scores.tolist(), (extra_scores / penalty).tolist(),
                                               strict=True):
            by_group[row // width].setdefault((row, token), (value, normed))
        kept_groups, kept_rows, kept_tokens, kept_scores, kept_standings = [], [], [], [], []
        for group, found in enumerate(by_group):
            sent = active[group]
            ranked = sorted(((value, normed, row, token, standings[row].advance(token))
                             for (row, token), (value, normed) in found.items() if value > NEG_INF),
                            key=lambda c: -c[0])
            striped = _allocate(ranked)
            for rank, (value, normed, row, token, _) in striped:
                if token == eos and rank < k:
                    _finish(finished[sent], k, Hypothesis(
                        history[row].tolist(), normed, value,
                        _attention(attn_history, row, src_mask[sent]) if return_attention else None,
                        standings[row].unmet))
            if len(finished[sent]) == k:
                worst[group] = finished[sent][-1].score
            chosen = [(value, row, token, after) for _, (value, _, row, token, after) in striped if token != eos][:k]
            best_alive = max((c[0] for c in chosen), default=NEG_INF) / penalty
            done = limits[group] <= step or (worst[group] >= best_alive if stop == "bound" else worst[group] > NEG_INF)
            if done:
                continue
            dead = k - len(chosen)  # fewer candidates than beams: the missing beams start dead
            first = chosen[0] if chosen else (NEG_INF, group * width, eos, standings[group * width])
            chosen += [(NEG_INF, first[1], first[2], first[3])] * dead
            kept_groups.append(group)
            kept_rows.append([c[1] for c in chosen])
            kept_tokens += [c[2] for c in chosen]
            kept_scores.append([c[0] for c in chosen])
            kept_standings += [c[3] for c in chosen]
        groups = torch.tensor(kept_rows, dtype=torch.long, device=device).view(-1, k)  # (n', K)
        rows = groups.view(-1)  # (n'*K,)
        prev = torch.tensor(kept_tokens, dtype=torch.long, device=device)  # (n'*K,)
        state = model.reorder_state(state, groups)
        history = torch.cat([history[rows], prev[:, None]], dim=1)  # (n'*K, t+1)
        attn_history = attn_history[rows]
        scores = torch.tensor(kept_scores, device=device).view(-1, k)  # (n', K)
        keep = torch.tensor(kept_groups, dtype=torch.long, device=device)  # (n',)
        active, limit, standings, width = [active[g] for g in kept_groups], limit[keep], kept_standings, k
        limits, worst = [limits[g] for g in kept_groups], [worst[g] for g in kept_groups]
        step += 1
    return [kept[:n_best] for kept in finished]


def _finish(kept: list[Hypothesis], k: int, hyp: Hypothesis) -> None:
    """Add a finished hypothesis to a sentence's `k` best, ordered by unmet terms, then score."""
    kept.append(hyp)
    kept.sort(key=lambda h: (h.unmet, -h.score))
    del kept[k:]


Candidate = tuple[float, float, int, int, Standing]  # summed log-prob, score, row it extends, token, standing after


def _allocate(ranked: list[Candidate]) -> list[tuple[int, Candidate]]:
    """Dynamic beam allocation: `ranked` reordered so banks take turns, fullest first; each with its bank rank."""

    if len({candidate[4].bank for candidate in ranked}) < 2:
        return list(enumerate(ranked))
    seen: dict[int, int] = {}
    order = []
    for index, candidate in enumerate(ranked):
        bank = candidate[4].bank
        rank = seen[bank] = seen.get(bank, -1) + 1
        order.append((rank, -bank, index))
    return [(rank, ranked[index]) for rank, _, index in sorted(order)]


@torch.inference_mode()
def forced_log_probs(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                     tgt_out: torch.Tensor) -> torch.Tensor:
    """(B, T) log-probability of each `tgt_out` token given the `tgt_in` prefix, stepped as in search; 0 at padding."""
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
    """Several models decoding as one, averaging their log-probabilities; they must share special ids and vocabulary
    size (the caller checks the vocabulary itself)."""

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


class Suppressing(Seq2Seq):
    """A model that never emits the tokens of `suppressed` (-inf); other log-probabilities are not renormalized."""

    def __init__(self, model: Seq2Seq, suppressed: frozenset[int]) -> None:
        super().__init__()
        self.model = model
        self.pad_id, self.bos_id, self.eos_id = model.pad_id, model.bos_id, model.eos_id
        self.max_positions = model.max_positions
        self.suppressed = torch.tensor(sorted(suppressed), dtype=torch.long)  # (K,)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        return self.model.encode(src, src_mask)

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> State:
        return self.model.init_state(memory, src_mask)

    def step(self, prev_tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        log_probs, state = self.model.step(prev_tokens, state)  # (B, V)
        return log_probs.index_fill(1, self.suppressed.to(log_probs.device), NEG_INF), state  # (B, V)

    def reorder_state(self, state: State, indices: torch.Tensor) -> State:
        return self.model.reorder_state(state, indices)
