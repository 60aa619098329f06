"""Import a Marian/OPUS-MT folder (or a Pegasus or Blenderbot one as nmt exports them) as an nmt checkpoint, with
MarianTokenizer's vocabularies reordered so that nmt's special ids hold the folder's special rows."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import CheckpointContents, save_contents
from nmt.config import Config, config_from_dict
from nmt.errors import CheckpointError, ExportError, short_repr
from nmt.interop.hf_folder import ModelFolder, pick_tensors
from nmt.interop.hf_weights import CLASSES, from_hf_weights, import_transformers, needed_tensors, quiet
from nmt.models import build_model, check_weights
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer

ADDED_PAD = "<nmt_pad>"  # the piece of a padding row added where the pad token is the decoder start
# transformers' ACT2FN names -> model.activation ("silu" and "swish" are both x * sigmoid(x))
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}

# config.json's sizes, each checked to be a whole number >= 1 before transformers reads it
SIZE_KEYS = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_ffn_dim", "decoder_ffn_dim",
             "encoder_attention_heads", "decoder_attention_heads", "max_position_embeddings")


def _hf_settings(transformers: Any, raw: dict[str, Any], folder: Path) -> tuple[str, Any]:
    """The model type and transformers' config of a folder's config.json, whose sizes are whole numbers."""
    kind = raw.get("model_type")
    if kind not in CLASSES:
        raise ExportError(f"{folder}/config.json: model_type {short_repr(kind)} is not one nmt imports "
                          f"({', '.join(CLASSES)})")
    for key in (*SIZE_KEYS, "decoder_vocab_size"):
        value = raw.get(key)
        if key in raw and not (key == "decoder_vocab_size" and value is None) and (  # null: vocab_size
                not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ExportError(f"{folder}/config.json: {key} {short_repr(value)} is not a whole number of at least 1")
    try:
        with quiet(transformers):
            return kind, getattr(transformers, CLASSES[kind]).config_class.from_dict(raw)
    except Exception as err:  # noqa: BLE001 - transformers refuses a config in many ways
        detail = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        raise ExportError(f"{folder}/config.json: transformers cannot read it ({detail})") from None


def _table(folder: ModelFolder, name: str) -> list[str]:
    """The pieces of a vocab.json by id; its ids must be 0 to n - 1, once each."""
    vocab = folder.json(name)
    path = folder.path / name
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ExportError(f"{path}: not a mapping of subwords to ids")
    table = [""] * len(vocab)
    for piece, i in vocab.items():
        if not 0 <= i < len(table) or table[i]:
            raise ExportError(f"{path}: its ids are not 0 to {len(table) - 1}, each once (id {i})")
        table[i] = piece
    return table


def _reorder(table: list[str], pad: int, unk: int, start: int, eos: int) -> list[int | None]:
    """The folder's id of each of our ids, the special ids first; None for an added padding row."""
    if len({pad, unk, eos}) < 3 or start in (unk, eos):  # only the decoder start may be the pad token
        raise ExportError(f"the special ids pad {pad}, unk {unk}, decoder start {start} and EOS {eos} overlap")
    if max(pad, unk, start, eos) >= len(table) or min(pad, unk, start, eos) < 0:
        raise ExportError(f"a special id (pad {pad}, unk {unk}, decoder start {start}, EOS {eos}) is outside the "
                          f"vocabulary of {len(table)}")
    picks: list[int | None] = [None] * 4
    picks[PAD_ID] = None if pad == start else pad
    picks[UNK_ID], picks[BOS_ID], picks[EOS_ID] = unk, start, eos
    return picks + [i for i in range(len(table)) if i not in {pad, unk, start, eos}]


def _vocabularies(files: ModelFolder, config: Any,
                  generation: dict[str, Any]) -> tuple[list[list[str]], list[list[int | None]]]:
    """The folder's vocabularies (vocab.json, and target_vocab.json where tokenizer_config.json says they are
    separate), checked against config.json's sizes, and for each the folder's id of each of our ids (`_reorder`)."""
    folder = files.path
    tokenizer_config = files.json_object("tokenizer_config.json", optional=True)
    separate = bool(tokenizer_config.get("separate_vocabs", False))
    names = ["vocab.json", "target_vocab.json" if separate else "vocab.json"]
    tables = [_table(files, name) for name in dict.fromkeys(names)]  # one table for a joint vocabulary
    sizes = {"vocab_size": config.vocab_size,
             "decoder_vocab_size": getattr(config, "decoder_vocab_size", None) or config.vocab_size}
    for table, (key, size), name in zip(tables * (3 - len(tables)), sizes.items(), names, strict=True):
        if len(table) != size:
            raise ExportError(f"{folder}/{name}: {len(table):,} entries, but config.json's {key} {size:,}")
    unk_piece = str(tokenizer_config.get("unk_token", "<unk>"))
    if unk_piece not in tables[0]:
        raise ExportError(f"{folder}/vocab.json: has no unknown-word piece {short_repr(unk_piece)}")
    pad = _setting(generation, "pad_token_id", config.pad_token_id, (int,), folder)
    eos = generation.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) and eos else eos
    eos = config.eos_token_id if eos is None else eos
    start = _setting(generation, "decoder_start_token_id", config.decoder_start_token_id, (int,), folder)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in (pad, eos, start)):
        raise ExportError(f"{folder}: the pad ({pad}), EOS ({eos}) and decoder start ({start}) ids must be numbers")
    try:
        return tables, [_reorder(table, pad, table.index(unk_piece) if unk_piece in table else -1, start, eos)
                        for table in tables]
    except ExportError as err:
        raise ExportError(f"{folder}: {err}") from None


def _model_settings(config: Any, folder: Path, kind: str) -> dict[str, Any]:
    """Our model section for a transformers config, or ExportError naming what nmt cannot hold."""
    def refuse(what: str) -> ExportError:
        return ExportError(f"{folder}/config.json: {what}; nmt's Transformer cannot hold it")

    if config.encoder_attention_heads != config.decoder_attention_heads:
        raise refuse(f"{config.encoder_attention_heads} encoder and {config.decoder_attention_heads} decoder heads")
    if config.encoder_ffn_dim != config.decoder_ffn_dim:
        raise refuse(f"feed-forward sizes {config.encoder_ffn_dim} and {config.decoder_ffn_dim} differ")
    if config.activation_function not in HF_ACTIVATIONS:
        raise refuse(f"activation_function {short_repr(config.activation_function)} (nmt has "
                     f"{', '.join(HF_ACTIVATIONS)})")
    if not config.scale_embedding:
        raise refuse("scale_embedding is false (nmt always scales embeddings by sqrt(d_model))")
    if config.d_model % config.encoder_attention_heads:
        raise refuse(f"d_model {config.d_model} is not divisible by {config.encoder_attention_heads} heads")
    if kind == "marian" and config.d_model % 2:
        raise refuse(f"d_model {config.d_model} is odd")
    shared = getattr(config, "share_encoder_decoder_embeddings", True) and config.tie_word_embeddings
    return {"arch": "transformer", "d_model": config.d_model, "ffn_dim": config.encoder_ffn_dim,
            "activation": HF_ACTIVATIONS[config.activation_function], "heads": config.encoder_attention_heads,
            "encoder_layers": config.encoder_layers, "decoder_layers": config.decoder_layers,
            "pre_norm": kind != "marian", "positions": "learned" if kind == "blenderbot" else "sinusoidal",
            "max_positions": config.max_position_embeddings, "dropout": float(config.dropout),
            "attention_dropout": float(config.attention_dropout), "tie_embeddings": bool(shared)}


def _setting(generation: dict[str, Any], key: str, default: Any, kinds: tuple[type, ...], folder: Path) -> Any:
    """generation_config.json's `key` (`default` where absent or null), or ExportError when not one of `kinds`."""
    value = generation.get(key)
    if value is None:
        return default
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise ExportError(f"{folder}/generation_config.json: {key} {short_repr(value)} is not a number")
    return value


def _run_name(folder: Path) -> str:
    """A valid run name from the folder's own name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(os.path.abspath(folder)).name).strip("_.-")
    return name[:200] or "imported"


def _nmt_config(raw: dict[str, Any], folder: Path) -> Config:
    try:
        return config_from_dict(raw)
    except ValueError as err:
        raise ExportError(f"{folder}: its settings do not make a valid nmt config ({err})") from None


def _shapes_model(transformers: Any, kind: str, config: Any, folder: Path) -> torch.nn.Module:
    """transformers' class for `config` on the meta device: every tensor's name and shape, no memory."""
    try:
        with quiet(transformers), torch.device("meta"):
            return getattr(transformers, CLASSES[kind])(config)
    except Exception as err:  # noqa: BLE001 - transformers refuses settings in many ways
        detail = " ".join(str(err).split())[:300]
        raise ExportError(f"{folder}/config.json: transformers cannot build its model ({type(err).__name__}: "
                          f"{detail})") from None


def import_huggingface(folder: str | Path, output: str | Path) -> dict[str, Any]:
    """Convert a local model folder, read as untrusted input, into an nmt checkpoint at `output`; returns what the
    checkpoint records of its source."""
    folder, output = Path(folder), Path(output)
    if output.exists():
        raise ExportError(f"{output}: already exists; choose a new checkpoint path")
    files = ModelFolder(folder)
    raw_config = files.json_object("config.json")
    transformers = import_transformers()
    kind, config = _hf_settings(transformers, raw_config, folder)
    model = _model_settings(config, folder, kind)
    generation = files.json_object("generation_config.json", optional=True)
    tables, orders = _vocabularies(files, config, generation)
    ours = [[ADDED_PAD if i is None else table[i] for i in order] for table, order in zip(tables, orders, strict=True)]
    if ADDED_PAD in tables[0]:
        raise ExportError(f"{folder}/vocab.json: already holds the piece {ADDED_PAD!r} nmt adds for padding")
    added = orders[-1][PAD_ID] is None
    spm_src, spm_tgt = files.read("source.spm"), files.read("target.spm")
    try:
        tokenizer = Tokenizer(spm_src, None if spm_src == spm_tgt else spm_tgt, ours)
    except ValueError as err:
        raise ExportError(f"{folder}: source.spm, target.spm and vocab.json do not make a tokenizer ({err})") from None
    decode = {"beam": _setting(generation, "num_beams", 1, (int,), folder),
              "length_penalty": float(_setting(generation, "length_penalty", 1.0, (int, float), folder))}
    raw = {"name": _run_name(folder), "data": {"max_tokens": min(128, model["max_positions"] - 2)},
           "tokenizer": {"joint": len(tables) == 1, "vocab_size": len(ours[-1])},
           "model": {**model, "output_bias": added}, "decode": decode}
    cfg = _nmt_config(raw, folder)  # sizes within nmt's bounds before transformers builds anything of them
    found = files.tensors(files.weight_files(raw_config))
    if "final_logits_bias" not in found:  # transformers too reads a Marian file without it as all zeros, by design
        found["final_logits_bias"] = torch.zeros(1, len(tables[-1]))
    hf = pick_tensors(found, _shapes_model(transformers, kind, config, folder), needed_tensors(cfg.model), folder)
    if not added and hf["final_logits_bias"].abs().max() > 0:
        raw["model"]["output_bias"] = True
        cfg = _nmt_config(raw, folder)
    weights = from_hf_weights(hf, cfg.model, kind, orders[0], orders[-1])
    del found, hf  # the folder's own tensors, freed before the model is built
    try:
        check_weights(cfg.model, tokenizer.vocab, weights)
    except CheckpointError as err:
        raise ExportError(f"{folder}: {err}") from None
    net = build_model(cfg.model, tokenizer.vocab)
    net.load_state_dict(weights)
    source = {"folder": str(folder), "model_type": kind, "transformers_version": transformers.__version__,
              "files": files.digests, "config": raw_config, "added_padding_row": added}
    save_contents(CheckpointContents.build(cfg, tokenizer, net, {"imported": source}), output)
    return source
