"""Conversions between nmt checkpoints and other toolkits' model folders (Hugging Face `transformers`:
`nmt.interop.huggingface`; CTranslate2 lives in `nmt.export`)."""
