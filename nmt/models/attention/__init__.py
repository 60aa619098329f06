"""The attention variants: the GRU decoder's over the encoder states (rnn.py), and the per-head cores of
transformer self-attention (full.py, local.py, sparse.py, linear.py). Masks are True where attending is allowed."""

from nmt.models.attention.base import RNNAttention, SelfAttention, variant_class
from nmt.models.attention.full import FullAttention

__all__ = ["FullAttention", "RNNAttention", "SelfAttention", "variant_class"]
