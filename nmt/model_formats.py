"""The names of the model formats nmt converts to and from, in a module without torch: the converters check
against them and nmt-export's and nmt-import's --help list them."""

from __future__ import annotations

EXPORT_FORMATS = ("ctranslate2", "huggingface")  # nmt.export, nmt.interop.hf_export
QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16")  # CTranslate2 weight types (nmt.engines.ctranslate2)
# a Hugging Face (Marian/OPUS-MT) model folder's files besides config.json (nmt.interop.hf_folder)
HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # each may also be sharded: <name>.index.json
HF_TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
