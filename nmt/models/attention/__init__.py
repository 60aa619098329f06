"""Every attention variant: one module per family, each variant one registered class.

Two families, one signature each:

- `RNN_ATTENTION`: how the GRU decoder attends over the encoder states. `project_keys` runs once per
  sentence; `forward(query (B, T, Dq), projected keys, values (B, S, Dv), mask (B, S))` returns the
  context (B, T, Dv) and the weights (B, T, S).
- `SELF_ATTENTION`: the per-head core of transformer self-attention, from projected queries, keys and
  values (B, h, T, d) to the per-head output. `build_mask` runs once per batch; `forward` serves training,
  `init_cache`, `step` and `reorder_cache` (rows moved by beam search) incremental decoding.

Masks are bool and True where attending is allowed (the same convention as `src_mask`).

base.py holds the interfaces and the registries; rnn.py the GRU decoder's attentions; full.py, local.py (the
banded kernel), sparse.py and linear.py the self-attention variants. A new variant is one module: its class,
`@register_self_attention(name)` (or `register_rnn_attention`), its `settings`, `from_config` when its
constructor needs more than its settings, and `flops` (and `step_flops` when a decoding step over its cache costs
other than its share of `flops`); then its import line below, which registers it. A built-in variant is also
declared by name and settings in nmt/config/variants.py, so that configs are checked without torch.
"""

from nmt.models.attention.base import (
    RNN_ATTENTION,
    SELF_ATTENTION,
    RNNAttention,
    SelfAttention,
    linear_flops,
    register_rnn_attention,
    register_self_attention,
    self_attention_variants,
    unregister_rnn_attention,
    unregister_self_attention,
)

# Importing a variant's module registers it; the registries, and so every list of valid names, follow this order.
from nmt.models.attention.rnn import (  # isort: split
    AdditiveAttention,
    DotAttention,
    GeneralAttention,
    NoAttention,
    ScaledDotAttention,
)

from nmt.models.attention.full import FullAttention  # isort: split

from nmt.models.attention.local import LocalAttention, band_spans  # isort: split

from nmt.models.attention.sparse import SparseAttention  # isort: split

from nmt.models.attention.linear import LinearAttention

__all__ = [
    "RNN_ATTENTION",
    "SELF_ATTENTION",
    "AdditiveAttention",
    "DotAttention",
    "FullAttention",
    "GeneralAttention",
    "LinearAttention",
    "LocalAttention",
    "NoAttention",
    "RNNAttention",
    "ScaledDotAttention",
    "SelfAttention",
    "SparseAttention",
    "band_spans",
    "linear_flops",
    "register_rnn_attention",
    "register_self_attention",
    "self_attention_variants",
    "unregister_rnn_attention",
    "unregister_self_attention",
]
