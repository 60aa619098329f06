"""Conversions between nmt checkpoints and other toolkits' model folders (Hugging Face `transformers`:
`nmt.interop.hf_export` and `nmt.interop.hf_import`, over the weight map in
`nmt.interop.hf_weights`; CTranslate2 lives in `nmt.export`)."""
