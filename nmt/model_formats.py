"""The model formats nmt converts to and from, without importing torch (for --help)."""

from __future__ import annotations

EXPORT_FORMATS = ("ctranslate2", "huggingface")  # nmt.export, nmt.interop.hf_export
QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16")  # CTranslate2 weight types
HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # either may be sharded: <name>.index.json
HF_TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
