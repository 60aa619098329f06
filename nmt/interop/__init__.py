"""Conversions between nmt checkpoints and Hugging Face model folders."""
