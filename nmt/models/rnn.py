"""Bidirectional GRU encoder and a GRU decoder with attention and Luong input feeding."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from nmt.config import ModelConfig
from nmt.kernels import Dropout
from nmt.models.attention import variant_class
from nmt.models.base import Memory, Seq2Seq, State, group_origins, select_positions

if TYPE_CHECKING:
    from nmt.tokenizer import VocabInfo


class GRUEncoder(nn.Module):
    """Bidirectional multi-layer GRU whose states never see padding (packed sequences)."""

    def __init__(self, embed: nn.Embedding, hidden_size: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embed = embed
        self.rnn = nn.GRU(embed.embedding_dim, hidden_size // 2, layers, batch_first=True, bidirectional=True,
                          dropout=dropout if layers > 1 else 0.0)
        self.dropout = Dropout(dropout)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor,
                lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """States (B, S, H), zero on padding, and every layer's and direction's final state (B, L * H); host
        `lengths` (B,) spare a copy back from the device."""
        x = self.dropout(self.embed(src))  # (B, S, E)
        if lengths is not None and x.device.type != "cpu":
            out, final = self.run_sorted(x, lengths)
        else:
            lengths = src_mask.sum(1).cpu() if lengths is None else lengths
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, final = self.rnn(packed)  # final: (2L, B, H/2), in the batch's original order
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))  # (B, S, H)
        return self.dropout(out), final.transpose(0, 1).reshape(src.size(0), -1)

    def run_sorted(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The GRU over `x` (B, S, E), sorted by host `lengths` (B,) without waiting for the device -> states
        (B, S, H), finals (2L, B, H/2)."""
        lengths, order = torch.sort(lengths.long(), descending=True, stable=True)  # (B,), (B,)
        moves = torch.stack([order, torch.argsort(order)])  # (2, B): into sorted order and back
        moves = (moves.pin_memory() if x.device.type == "cuda" else moves).to(x.device, non_blocking=True)
        packed = pack_padded_sequence(x.index_select(0, moves[0]), lengths, batch_first=True)
        out, final = self.rnn(packed)  # final: (2L, B, H/2), sorted
        out, _ = pad_packed_sequence(PackedSequence(out.data, out.batch_sizes), batch_first=True,
                                     total_length=x.size(1))  # (B, S, H), sorted
        return out.index_select(0, moves[1]), final.index_select(1, moves[1])


@dataclass
class RNNState(State):
    """The decoder GRU's state and input feed per row; the attention's keys, values and mask per sentence."""

    hidden: torch.Tensor  # (rows, L_dec, H)
    feed: torch.Tensor | None  # (rows, H) the last attentional vector; None without input feeding
    keys: torch.Tensor  # (G, S, A) projected once per sentence, not per step
    values: torch.Tensor  # (G, S, H)
    src_mask: torch.Tensor  # (G, S)


class RNNSeq2Seq(Seq2Seq):
    """GRU encoder-decoder with input feeding: a step's attentional vector tanh(W [h; context]) feeds the output
    and the next step's GRU."""

    def __init__(self, cfg: ModelConfig, vocab: VocabInfo) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = vocab.pad_id, vocab.bos_id, vocab.eos_id
        hidden, emb = cfg.hidden_size, cfg.emb_dim
        self.hidden_size = hidden
        self.decoder_layers = cfg.decoder_layers
        self.input_feeding = cfg.input_feeding
        self.src_embed = nn.Embedding(vocab.src_size, emb, padding_idx=vocab.pad_id)
        share = cfg.tie_embeddings and vocab.src_size == vocab.tgt_size
        self.tgt_embed = self.src_embed if share else nn.Embedding(vocab.tgt_size, emb, padding_idx=vocab.pad_id)
        self.encoder = GRUEncoder(self.src_embed, hidden, cfg.encoder_layers, cfg.dropout)
        self.bridge = nn.Linear(cfg.encoder_layers * hidden, cfg.decoder_layers * hidden)
        self.attention = variant_class("rnn", cfg.attention).from_config(cfg)
        self.decoder = nn.GRU(emb + (hidden if cfg.input_feeding else 0), hidden, cfg.decoder_layers,
                              batch_first=True, dropout=cfg.dropout if cfg.decoder_layers > 1 else 0.0)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.output = nn.Linear(hidden, vocab.tgt_size)
        self.dropout = Dropout(cfg.dropout)
        for embed in dict.fromkeys((self.src_embed, self.tgt_embed)):  # once each, in a fixed order
            nn.init.normal_(embed.weight, std=emb**-0.5)
            nn.init.zeros_(embed.weight[vocab.pad_id])
        if cfg.tie_embeddings and emb == hidden:
            self.output.weight = self.tgt_embed.weight

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor, src_lengths: torch.Tensor | None = None) -> Memory:
        memory, final = self.encoder(src, src_mask, src_lengths)
        return {"memory": memory, "final": final}  # (B, S, H), (B, L_enc * H)

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> RNNState:
        states = memory["memory"]  # (B, S, H)
        batch = states.size(0)
        hidden = torch.tanh(self.bridge(memory["final"])).view(batch, self.decoder_layers, self.hidden_size)
        feed = states.new_zeros(batch, self.hidden_size) if self.input_feeding else None  # (B, H)
        return RNNState(hidden, feed, self.attention.project_keys(states), states, src_mask)

    def _attend(self, out: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, torch.Tensor]:
        """GRU outputs (rows, T, H) -> attentional vectors (rows, T, H) and weights (rows, T, S); a sentence's
        rows attend together over its keys and values, held once."""
        query = self.dropout(out)
        rows, length, size = query.shape
        grouped = query.reshape(state.keys.size(0), -1, size)  # (G, W*T, H)
        context, weights = self.attention(grouped, state.keys, state.values, state.src_mask)
        vectors = self.dropout(torch.tanh(self.combine(torch.cat([query, context.reshape_as(query)], -1))))
        return vectors, weights.reshape(rows, length, -1)

    def _decoder_steps(self, emb: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, torch.Tensor, RNNState]:
        """Embedded targets (rows, T, E) -> attentional vectors (rows, T, H), last weights (rows, S), next state."""
        hidden = state.hidden.transpose(0, 1).contiguous()  # (L, rows, H)
        if state.feed is None:  # no step depends on the previous attention: one GRU call for all steps
            out, hidden = self.decoder(emb, hidden)  # (rows, T, H)
            vectors, weights = self._attend(out, state)
            return vectors, weights[:, -1], replace(state, hidden=hidden.transpose(0, 1))
        feed = state.feed
        vectors = []
        for t in range(emb.size(1)):
            out, hidden = self.decoder(torch.cat([emb[:, t], feed], -1)[:, None], hidden)  # (rows, 1, H)
            vector, weights = self._attend(out, state)  # (rows, 1, H), (rows, 1, S)
            feed = vector[:, 0]
            vectors.append(vector)
        return torch.cat(vectors, 1), weights[:, -1], replace(state, hidden=hidden.transpose(0, 1), feed=feed)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                keep: torch.Tensor | None = None, src_lengths: torch.Tensor | None = None) -> torch.Tensor:
        state = self.init_state(self.encode(src, src_mask, src_lengths), src_mask)
        vectors, _, _ = self._decoder_steps(self.dropout(self.tgt_embed(tgt_in)), state)  # (B, T, H)
        return self.output(select_positions(vectors, keep))  # (B, T, V) or (N, V)

    def step(self, prev_tokens: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        vectors, weights, state = self._decoder_steps(self.dropout(self.tgt_embed(prev_tokens[:, None])), state)
        state.attention = weights  # (rows, S)
        return self.output(vectors[:, 0]).float().log_softmax(-1), state

    def reorder_state(self, state: RNNState, indices: torch.Tensor) -> RNNState:
        """The GRU state and feed follow the rows; keys, values and mask only the sentences that go on."""
        rows = indices.reshape(-1)  # (G'*W',)
        origins = group_origins(indices, state.width, state.keys.size(0))

        def sentences(x: torch.Tensor) -> torch.Tensor:
            return x if origins is None else x.index_select(0, origins)

        feed = None if state.feed is None else state.feed.index_select(0, rows)
        return RNNState(state.hidden.index_select(0, rows), feed, sentences(state.keys), sentences(state.values),
                        sentences(state.src_mask), width=indices.size(1))
