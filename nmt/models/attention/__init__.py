"""The attention variants, one module per family.

- The GRU decoder's attention over the encoder states (rnn.py): `project_keys` runs once per sentence;
  `forward(query (B, T, Dq), projected keys, values (B, S, Dv), mask (B, S))` returns the context (B, T, Dv)
  and the weights (B, T, S).
- The per-head core of transformer self-attention (full.py, local.py, sparse.py, linear.py), from projected
  queries, keys and values (B, h, T, d) to the per-head output. `build_mask` runs once per batch; `forward`
  serves training, `init_cache`, `step` and `reorder_cache` (rows moved by beam search) incremental decoding.

Masks are bool and True where attending is allowed (the same convention as `src_mask`). nmt.config.VARIANTS
names each variant's class and settings; `variant_class` imports it.
"""

from nmt.models.attention.base import RNNAttention, SelfAttention, variant_class
from nmt.models.attention.full import FullAttention

__all__ = ["FullAttention", "RNNAttention", "SelfAttention", "variant_class"]
