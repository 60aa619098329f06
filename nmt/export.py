"""Conversion of Transformer checkpoints to CTranslate2, through its own `TransformerSpec` filled from the model's
modules; the sinusoid table is written out, since CTranslate2's orders sines and cosines differently."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.checkpoint import LoadedModel, load_model
from nmt.config import to_dict
from nmt.engines.ctranslate2 import (
    FORMAT_VERSION,
    MANIFEST,
    check_quantization,
    import_ctranslate2,
    read_manifest,
    spm_files,
    supported_quantizations,
)
from nmt.errors import ExportError
from nmt.fileio import new_mode, sha256_file
from nmt.models.transformer import Transformer, sinusoidal_table
from nmt.tokenizer import model_pieces

# the names of an export folder's format, for the callers that know them from here
__all__ = ["MANIFEST", "ExportError", "export_ctranslate2", "read_manifest", "supported_quantizations"]


def _np(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()


def _linear(spec: Any, linear: torch.nn.Linear, scale: float = 1.0, rows: int | None = None) -> None:
    """Weights (and bias) of a linear layer; the first `rows` output rows (default all) are multiplied by `scale`."""
    weight = _np(linear.weight)
    bias = _np(linear.bias) if linear.bias is not None else None
    end = weight.shape[0] if rows is None else rows
    weight[:end] *= scale
    spec.weight = weight
    if bias is not None:
        bias[:end] *= scale
        spec.bias = bias


def _norm(spec: Any, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _ffn(spec: Any, ffn: torch.nn.Sequential, norm: torch.nn.LayerNorm) -> None:
    _norm(spec.layer_norm, norm)
    _linear(spec.linear_0, ffn[0])
    _linear(spec.linear_1, ffn[2])


def _positions(embedder: Any, dim: int, length: int) -> np.ndarray:
    if embedder.learned is not None:
        return _np(embedder.learned.weight)
    return sinusoidal_table(length, dim).numpy()


def _spec(loaded: LoadedModel) -> Any:
    """ctranslate2's TransformerSpec filled with the weights of a loaded Transformer."""
    import_ctranslate2()
    from ctranslate2.specs import transformer_spec

    cfg, model = loaded.cfg.model, loaded.model
    if loaded.tokenizer.tables:
        raise ExportError(f"{loaded.path}: its ids come from a Hugging Face vocab.json (an imported model), which "
                          "CTranslate2's sentencepiece vocabulary cannot hold; export it with --format huggingface")
    if cfg.arch != "transformer" or not isinstance(model, Transformer):
        raise ExportError(f"{loaded.path}: a {cfg.arch} model cannot be exported: CTranslate2 has no such "
                          "architecture (only Transformer checkpoints can be exported)")
    if cfg.self_attention != "full":
        raise ExportError(f"{loaded.path}: self-attention '{cfg.self_attention}' has no CTranslate2 equivalent "
                          "(only 'full' can be exported)")
    head_scale = 1.0 / cfg.temperature  # softmax(q k / (sqrt(d) t)) == softmax((q / t) k / sqrt(d))
    d = cfg.d_model
    from ctranslate2.specs.common_spec import Activation

    activation = {"relu": Activation.RELU, "gelu": Activation.GELU, "swish": Activation.SWISH}[cfg.activation]
    encoder = transformer_spec.TransformerEncoderSpec(cfg.encoder_layers, cfg.heads, pre_norm=cfg.pre_norm,
                                                      activation=activation)
    decoder = transformer_spec.TransformerDecoderSpec(cfg.decoder_layers, cfg.heads, pre_norm=cfg.pre_norm,
                                                      activation=activation)
    encoder.embeddings[0].weight = _np(model.src_embed.tokens.weight)
    decoder.embeddings.weight = _np(model.tgt_embed.tokens.weight)
    encoder.position_encodings.encodings = _positions(model.src_embed, d, cfg.max_positions)
    decoder.position_encodings.encodings = _positions(model.tgt_embed, d, cfg.max_positions)
    if cfg.pre_norm:
        _norm(encoder.layer_norm, model.encoder_norm)
        _norm(decoder.layer_norm, model.decoder_norm)
    for spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        _norm(spec.self_attention.layer_norm, layer.norms[0])
        _linear(spec.self_attention.linear[0], layer.self_attn.qkv, head_scale, rows=d)
        _linear(spec.self_attention.linear[1], layer.self_attn.out)
        _ffn(spec.ffn, layer.ffn, layer.norms[1])
    for spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _norm(spec.self_attention.layer_norm, layer.norms[0])
        _linear(spec.self_attention.linear[0], layer.self_attn.qkv, head_scale, rows=d)
        _linear(spec.self_attention.linear[1], layer.self_attn.out)
        _norm(spec.attention.layer_norm, layer.norms[1])
        _linear(spec.attention.linear[0], layer.cross_attn.q, head_scale)
        _linear(spec.attention.linear[1], layer.cross_attn.kv)
        _linear(spec.attention.linear[2], layer.cross_attn.out)
        _ffn(spec.ffn, layer.ffn, layer.norms[2])
    _linear(decoder.projection, model.output)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = model.decoder_layers[0].norms[0].eps
    return spec


def export_ctranslate2(source: str | Path, output: str | Path, quantization: str = "float32") -> dict[str, Any]:
    """Convert a Transformer checkpoint (or a run folder's best) into a CTranslate2 folder; returns the manifest."""
    output = Path(output)
    check_quantization(quantization, ("cpu", "cuda"))
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ExportError(f"{output}: already exists; choose a new folder")
    loaded = load_model(source, torch.device("cpu"))
    spec = _spec(loaded)

    def fill(tmp: Path) -> None:
        loaded.tokenizer.save(tmp)
        protos = [(tmp / name).read_bytes() for name in spm_files(tmp)]
        spec.register_source_vocabulary(model_pieces(protos[0]))
        spec.register_target_vocabulary(model_pieces(protos[-1]))
        try:
            spec.validate()
            spec.optimize(quantization=quantization)
        except ValueError as err:
            raise ExportError(f"{loaded.path}: CTranslate2 refused the model ({err})") from None
        spec.save(str(tmp))

    head = {"format": "ctranslate2", "format_version": FORMAT_VERSION, "quantization": quantization,
            "ctranslate2_version": import_ctranslate2().__version__}
    return publish_export(output, loaded, MANIFEST, head, fill)


def publish_export(output: Path, loaded: LoadedModel, manifest_name: str, head: dict[str, Any],
                   fill: Callable[[Path], None]) -> dict[str, Any]:
    """An export folder that `fill` writes, renamed into place, with a manifest of its source and files."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}."))
    try:
        tmp.chmod(new_mode(folder=True))
        fill(tmp)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {**head, "source_checkpoint": str(loaded.path), "source_sha256": sha256_file(loaded.path),
                    "tokenizer_id": loaded.tokenizer.identity, "languages": list(loaded.cfg.data.languages),
                    "config": to_dict(loaded.cfg), "files": files}
        (tmp / manifest_name).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if output.is_dir():
            output.rmdir()
        os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest
