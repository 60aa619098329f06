"""Transformer encoder-decoder with pluggable self-attention and cached incremental decoding."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from nmt.config import ModelConfig
from nmt.kernels import Dropout
from nmt.models.attention import FullAttention, SelfAttention, variant_class
from nmt.models.base import Memory, Seq2Seq, State, group_origins, select_positions

if TYPE_CHECKING:
    from nmt.tokenizer import VocabInfo


# model.activation -> the feed-forward activation (transformers' "swish" is SiLU too)
ACTIVATION_MODULES: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}


def sinusoidal_table(length: int, dim: int) -> torch.Tensor:
    """Sine/cosine position encodings, (length, dim)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]  # (L, 1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (dim/2,)
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table


class Embedder(nn.Module):
    """Token embedding scaled by sqrt(d_model), plus positions, then dropout."""

    def __init__(self, tokens: nn.Embedding, positions: str, max_positions: int, dropout: float) -> None:
        super().__init__()
        dim = tokens.embedding_dim
        self.tokens = tokens
        self.scale = math.sqrt(dim)
        learned = positions == "learned"
        self.learned = nn.Embedding(max_positions, dim) if learned else None
        self.register_buffer("table", None if learned else sinusoidal_table(max_positions, dim), persistent=False)
        self.dropout = Dropout(dropout)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Ids (B, T) at positions `pos` (T,) or (B, T) -> (B, T, d)."""
        where = self.learned(pos) if self.learned is not None else self.table[pos]
        return self.dropout(self.tokens(ids) * self.scale + where)


def _xavier(linear: nn.Linear, parts: int = 1) -> nn.Linear:
    """Xavier-uniform weights (each of `parts` fused projections on its own), zero bias."""
    for weight in linear.weight.data.chunk(parts, dim=0):
        nn.init.xavier_uniform_(weight)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)
    return linear


def _split_heads(x: torch.Tensor, parts: int, heads: int) -> tuple[torch.Tensor, ...]:
    """(B, T, parts * d_model) -> `parts` tensors (B, h, T, d_head)."""
    batch, length, width = x.shape
    x = x.view(batch, length, parts, heads, width // (parts * heads))  # (B, T, parts, h, dh)
    return x.permute(2, 0, 3, 1, 4).unbind(0)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, T, dh) -> (B, T, h * dh)."""
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


class MultiHeadSelfAttention(nn.Module):
    """Fused Q/K/V projection around a self-attention core from `nmt.models.attention`."""

    def __init__(self, d_model: int, heads: int, core: SelfAttention) -> None:
        super().__init__()
        self.heads = heads
        self.core = core
        self.qkv = _xavier(nn.Linear(d_model, 3 * d_model), parts=3)
        self.out = _xavier(nn.Linear(d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        q, k, v = _split_heads(self.qkv(x), 3, self.heads)  # (B, h, T, dh) each
        out, _ = self.core(q, k, v, mask, causal)
        return self.out(_merge_heads(out))  # (B, T, d)

    def step(self, x: torch.Tensor, cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        q, k, v = _split_heads(self.qkv(x), 3, self.heads)  # (B, h, 1, dh) each
        out, cache = self.core.step(q, k, v, cache)
        return self.out(_merge_heads(out)), cache  # (B, 1, d)


class CrossAttention(nn.Module):
    """Full attention of the decoder over the encoder memory, whose keys and values are projected once."""

    def __init__(self, d_model: int, heads: int, core: FullAttention) -> None:
        super().__init__()
        self.heads = heads
        self.core = core
        self.q = _xavier(nn.Linear(d_model, d_model))
        self.kv = _xavier(nn.Linear(d_model, 2 * d_model), parts=2)
        self.out = _xavier(nn.Linear(d_model, d_model))

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Memory (B, S, d) -> keys and values (B, h, S, dh)."""
        k, v = _split_heads(self.kv(memory), 2, self.heads)
        return k, v

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        (q,) = _split_heads(self.q(x), 1, self.heads)  # (B, h, T, dh)
        out, weights = self.core(q, k, v, mask, need_weights=need_weights)
        return self.out(_merge_heads(out)), weights  # (B, T, d), (B, h, T, S) or None


class _Layer(nn.Module):
    """Residual wiring shared by encoder and decoder layers: pre-norm or post-norm."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float, pre_norm: bool, sublayers: int,
                 activation: str = "relu") -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(sublayers))
        # No dropout on the wide hidden layer (fairseq's default): the sublayer output is dropped anyway.
        self.ffn = nn.Sequential(_xavier(nn.Linear(d_model, ffn_dim)), ACTIVATION_MODULES[activation](),
                                 _xavier(nn.Linear(ffn_dim, d_model)))
        self.dropout = Dropout(dropout)

    def _in(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """The input of sublayer `i`."""
        return self.norms[i](x) if self.pre_norm else x

    def _add(self, x: torch.Tensor, out: torch.Tensor, i: int) -> torch.Tensor:
        """The residual connection around sublayer `i`."""
        x = x + self.dropout(out)
        return x if self.pre_norm else self.norms[i](x)

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.norms) - 1
        return self._add(x, self.ffn(self._in(x, last)), last)


class EncoderLayer(_Layer):
    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float, pre_norm: bool,
                 core: SelfAttention, activation: str = "relu") -> None:
        super().__init__(d_model, ffn_dim, dropout, pre_norm, sublayers=2, activation=activation)
        self.self_attn = MultiHeadSelfAttention(d_model, heads, core)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self._add(x, self.self_attn(self._in(x, 0), mask, causal=False), 0)
        return self._feed_forward(x)


class DecoderLayer(_Layer):
    def __init__(self, d_model: int, heads: int, ffn_dim: int, dropout: float, pre_norm: bool,
                 core: SelfAttention, cross_core: FullAttention, activation: str = "relu") -> None:
        super().__init__(d_model, ffn_dim, dropout, pre_norm, sublayers=3, activation=activation)
        self.self_attn = MultiHeadSelfAttention(d_model, heads, core)
        self.cross_attn = CrossAttention(d_model, heads, cross_core)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None,
                memory_mask: torch.Tensor) -> torch.Tensor:
        x = self._add(x, self.self_attn(self._in(x, 0), self_mask, causal=True), 0)
        k, v = self.cross_attn.project_memory(memory)
        x = self._add(x, self.cross_attn(self._in(x, 1), k, v, memory_mask)[0], 1)
        return self._feed_forward(x)

    def step(self, x: torch.Tensor, state: LayerState, memory_mask: torch.Tensor, need_weights: bool
             ) -> tuple[torch.Tensor, LayerState, torch.Tensor | None]:
        """One position of G sentences' rows (G*W, 1, d) -> output, next state and cross weights (G, h, W, S); a
        sentence's W rows attend together over its memory, held once."""
        out, cache = self.self_attn.step(self._in(x, 0), state.cache)
        x = self._add(x, out, 0)
        groups, dim = state.memory_k.size(0), x.size(-1)
        queries = self._in(x, 1).view(groups, -1, dim)  # (G, W, d)
        out, weights = self.cross_attn(queries, state.memory_k, state.memory_v, memory_mask, need_weights)
        x = self._add(x, out.view_as(x), 1)
        return self._feed_forward(x), LayerState(cache, state.memory_k, state.memory_v), weights


@dataclass
class LayerState:
    """One decoder layer's part of the decoding state."""

    cache: dict[str, torch.Tensor]  # its self-attention core's cache, reordered by the core (`reorder_cache`)
    memory_k: torch.Tensor  # (G, h, S, dh) cross-attention keys, projected once per sentence
    memory_v: torch.Tensor  # (G, h, S, dh) and values


@dataclass
class TransformerState(State):
    """Per layer its caches, the source mask per sentence, and the position of the next target token."""

    pos: torch.Tensor  # (1,) the same for every row: each step advances them all
    memory_mask: torch.Tensor  # (G, 1, 1, S)
    layers: list[LayerState]


class Transformer(Seq2Seq):
    """Encoder-decoder transformer; the self-attention variant comes from `model.self_attention`."""

    def __init__(self, cfg: ModelConfig, vocab: VocabInfo) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = vocab.pad_id, vocab.bos_id, vocab.eos_id
        self.max_positions = cfg.max_positions
        d = cfg.d_model
        self.heads = cfg.heads
        src_tokens = nn.Embedding(vocab.src_size, d, padding_idx=vocab.pad_id)
        share = cfg.tie_embeddings and vocab.src_size == vocab.tgt_size
        tgt_tokens = src_tokens if share else nn.Embedding(vocab.tgt_size, d, padding_idx=vocab.pad_id)
        self.src_embed = Embedder(src_tokens, cfg.positions, cfg.max_positions, cfg.dropout)
        self.tgt_embed = Embedder(tgt_tokens, cfg.positions, cfg.max_positions, cfg.dropout)
        self.self_core = variant_class("self", cfg.self_attention).from_config(cfg)
        cross_core = FullAttention(cfg.temperature, cfg.attention_dropout)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(d, cfg.heads, cfg.ffn_dim, cfg.dropout, cfg.pre_norm, self.self_core, cfg.activation)
            for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(d, cfg.heads, cfg.ffn_dim, cfg.dropout, cfg.pre_norm, self.self_core, cross_core,
                         cfg.activation)
            for _ in range(cfg.decoder_layers))
        self.encoder_norm = nn.LayerNorm(d) if cfg.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if cfg.pre_norm else nn.Identity()
        self.output = _xavier(nn.Linear(d, vocab.tgt_size, bias=cfg.output_bias))  # a bias starts at zero
        for embedding in (src_tokens, tgt_tokens, self.src_embed.learned, self.tgt_embed.learned):
            if embedding is not None:
                nn.init.normal_(embedding.weight, std=d**-0.5)
        for tokens in (src_tokens, tgt_tokens):
            nn.init.zeros_(tokens.weight.data[vocab.pad_id])
        if cfg.tie_embeddings:
            self.output.weight = tgt_tokens.weight

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        length = src.size(1)
        x = self.src_embed(src, torch.arange(length, device=src.device))  # (B, S, d)
        mask = self.self_core.build_mask(length, src_mask, causal=False, device=src.device)
        for layer in self.encoder_layers:
            x = layer(x, mask)
        return {"memory": self.encoder_norm(x)}  # (B, S, d)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                keep: torch.Tensor | None = None, src_lengths: torch.Tensor | None = None) -> torch.Tensor:
        memory = self.encode(src, src_mask)["memory"]
        length = tgt_in.size(1)
        x = self.tgt_embed(tgt_in, torch.arange(length, device=tgt_in.device))  # (B, T, d)
        self_mask = self.self_core.build_mask(length, None, causal=True, device=tgt_in.device)
        memory_mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, memory_mask)
        return self.output(self.decoder_norm(select_positions(x, keep)))  # (B, T, V) or (N, V)

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> TransformerState:
        states = memory["memory"]  # (B, S, d)
        batch, head_dim = states.size(0), states.size(-1) // self.heads
        layers = [LayerState(self.self_core.init_cache(batch, self.heads, head_dim, states),
                             *layer.cross_attn.project_memory(states)) for layer in self.decoder_layers]
        return TransformerState(torch.zeros(1, dtype=torch.long, device=states.device),
                                src_mask[:, None, None, :], layers)  # mask (B, 1, 1, S)

    def step(self, prev_tokens: torch.Tensor, state: TransformerState) -> tuple[torch.Tensor, TransformerState]:
        x = self.tgt_embed(prev_tokens[:, None], state.pos)  # (rows, 1, d)
        last = len(self.decoder_layers) - 1
        layers = []
        for i, (layer, layer_state) in enumerate(zip(self.decoder_layers, state.layers, strict=True)):
            x, layer_state, weights = layer.step(x, layer_state, state.memory_mask, need_weights=i == last)
            layers.append(layer_state)
        attention = weights.mean(1).view(x.size(0), -1)  # (rows, S), last layer, averaged over heads
        log_probs = self.output(self.decoder_norm(x))[:, 0].float().log_softmax(-1)  # (rows, V)
        return log_probs, TransformerState(state.pos + 1, state.memory_mask, layers, width=state.width,
                                           attention=attention)

    def reorder_state(self, state: TransformerState, indices: torch.Tensor) -> TransformerState:
        """Caches follow the rows; the memory, held per sentence, only the sentences that go on."""
        rows = indices.reshape(-1)  # (G'*W',)
        origins = group_origins(indices, state.width, state.memory_mask.size(0))

        def sentences(x: torch.Tensor) -> torch.Tensor:
            return x if origins is None else x.index_select(0, origins)

        layers = [LayerState(self.self_core.reorder_cache(layer.cache, rows),
                             sentences(layer.memory_k), sentences(layer.memory_v)) for layer in state.layers]
        return TransformerState(state.pos, sentences(state.memory_mask), layers, width=indices.size(1))
