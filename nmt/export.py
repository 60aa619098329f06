"""Conversion of Transformer checkpoints to CTranslate2, and decoding with the exported folder.

`export_ctranslate2` fills ctranslate2's own model specification (`TransformerSpec`) from the model's
modules, so pre- and post-norm, tied or untied embeddings and sinusoidal or learned positions all map onto
it; the sinusoid table is written out, since CTranslate2's built-in one orders sines and cosines differently.
An attention temperature is folded into the query projections. The folder receives CTranslate2's files, the
sentencepiece model(s) and `nmt_export.json`: the source checkpoint and its sha256, the run's config and the
sha256 of every file, checked each time the folder is loaded.

`CTranslate2Engine` decodes with CTranslate2's batched search under the settings of `nmt.decode`: beam
size, n-best, batches of `batch_tokens / beam` source tokens (cut by CTranslate2, one batch per CPU thread at
a time), the per-sentence length cap floor(a * source length + b) (the search runs to the longest cap; longer
outputs are cut to their sentence's cap and rescored with EOS there) and the length penalty
alpha, which CTranslate2 applies as log-probability / length ** alpha while ranking its finished hypotheses
(`nmt.decode` uses the GNMT form ((5 + length) / 6) ** alpha; beam 1 is unaffected). Its search is the one of
`decode.stop: finished` (a sentence ends once `beam` hypotheses have ended; at alpha 0 CTranslate2 also waits for
the best beam to end), so `stop: bound` is refused. CTranslate2 returns the `beam` finished hypotheses, and they
are ranked again with the GNMT penalty, so the n-best list is chosen as `nmt.decode` chooses it among the same
candidates. ctranslate2 is an optional dependency (`pip install 'nmt[deploy]'`), imported only here and only
when used.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm
import torch

from nmt.checkpoint import Loaded, load_model
from nmt.config import DecodeConfig, config_from_dict, to_dict
from nmt.data import sha256_file
from nmt.decode import Hypothesis, gnmt_penalty, max_lengths
from nmt.fileio import atomic_output, new_mode
from nmt.models.transformer import Transformer, sinusoidal_table
from nmt.tokenizer import EOS_ID, JOINT_FILE, SRC_FILE, TGT_FILE, Tokenizer
from nmt.translator import Member, Translator

FORMATS = ("ctranslate2",)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16")
MANIFEST = "nmt_export.json"
FORMAT_VERSION = 1


class ExportError(Exception):
    """A model that cannot be exported, or an export folder that cannot be used; the message says why."""


def _ctranslate2() -> Any:
    try:
        import ctranslate2
    except ImportError:
        raise ExportError("ctranslate2 is not installed; install the deploy extra: pip install 'nmt[deploy]'") from None
    return ctranslate2


def supported_quantizations(device: str) -> set[str]:
    """The quantizations CTranslate2 can run on `device` ("cpu" or "cuda") here."""
    ct2 = _ctranslate2()
    if device == "cuda" and ct2.get_cuda_device_count() == 0:
        return set()
    return set(ct2.get_supported_compute_types(device))


def _check_quantization(quantization: str, devices: Sequence[str]) -> None:
    """Refuse a quantization that is unknown or that none of `devices` can run here."""
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization '{quantization}' is not one of {', '.join(QUANTIZATIONS)}")
    runnable = set().union(*(supported_quantizations(device) for device in devices))
    if quantization not in runnable:
        raise ExportError(f"quantization {quantization} cannot run on this machine ({'/'.join(devices)} runs "
                          f"{', '.join(sorted(runnable & set(QUANTIZATIONS))) or 'none'}); export and decode on a "
                          "machine that runs it")


# ---------------------------------------------------------------------------------------------- conversion


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


def _spec(loaded: Loaded) -> Any:
    """ctranslate2's TransformerSpec filled with the weights of a loaded Transformer."""
    _ctranslate2()
    from ctranslate2.specs import transformer_spec

    cfg, model = loaded.cfg.model, loaded.model
    if cfg.arch != "transformer" or not isinstance(model, Transformer):
        raise ExportError(f"{loaded.path}: a {cfg.arch} model cannot be exported: CTranslate2 has no such "
                          "architecture (only Transformer checkpoints can be exported)")
    if cfg.self_attention != "full":
        raise ExportError(f"{loaded.path}: self-attention '{cfg.self_attention}' has no CTranslate2 equivalent "
                          "(only 'full' can be exported)")
    head_scale = 1.0 / cfg.temperature  # softmax(q k / (sqrt(d) t)) == softmax((q / t) k / sqrt(d))
    d = cfg.d_model
    encoder = transformer_spec.TransformerEncoderSpec(cfg.encoder_layers, cfg.heads, pre_norm=cfg.pre_norm)
    decoder = transformer_spec.TransformerDecoderSpec(cfg.decoder_layers, cfg.heads, pre_norm=cfg.pre_norm)
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


def _pieces(proto: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor(model_proto=proto)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _spm_files(folder: Path) -> list[str]:
    return [JOINT_FILE] if (folder / JOINT_FILE).is_file() else [SRC_FILE, TGT_FILE]


def export_ctranslate2(source: str | Path, output: str | Path, quantization: str = "float32") -> dict[str, Any]:
    """Convert a Transformer checkpoint (or a run folder's best) into a CTranslate2 folder; returns the manifest.

    Nothing is left behind on failure: the folder is built beside `output` and renamed into place.
    """
    output = Path(output)
    _check_quantization(quantization, ("cpu", "cuda"))
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ExportError(f"{output}: already exists; choose a new folder")
    loaded = load_model(source, torch.device("cpu"))
    spec = _spec(loaded)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}."))
    try:
        tmp.chmod(new_mode(folder=True))
        loaded.tokenizer.save(tmp)
        protos = [(tmp / name).read_bytes() for name in _spm_files(tmp)]
        spec.register_source_vocabulary(_pieces(protos[0]))
        spec.register_target_vocabulary(_pieces(protos[-1]))
        try:
            spec.validate()
            spec.optimize(quantization=quantization)
        except ValueError as err:
            raise ExportError(f"{loaded.path}: CTranslate2 refused the model ({err})") from None
        spec.save(str(tmp))
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {"format": "ctranslate2", "format_version": FORMAT_VERSION, "quantization": quantization,
                    "ctranslate2_version": _ctranslate2().__version__, "source_checkpoint": str(loaded.path),
                    "source_sha256": sha256_file(loaded.path), "tokenizer_id": loaded.tokenizer.identity,
                    "config": to_dict(loaded.cfg), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if output.is_dir():
            output.rmdir()
        os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


# ---------------------------------------------------------------------------------------------- decoding


def is_export(path: str | Path) -> bool:
    """Whether `path` is a CTranslate2 export folder (with or without a readable manifest)."""
    path = Path(path)
    return path.is_dir() and ((path / MANIFEST).is_file() or (path / "model.bin").is_file())


def export_files(folder: str | Path) -> list[Path]:
    """The files of an export folder that its manifest lists, unchecked (none when it cannot be read)."""
    folder = Path(folder)
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
        return [folder / name for name in files if isinstance(name, str)]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of an export folder, after checking every file it lists against its sha256."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest["format"] != "ctranslate2" or manifest["format_version"] != FORMAT_VERSION:
            raise ValueError("unknown format")
    except FileNotFoundError:
        raise ExportError(f"{folder}: no {MANIFEST}; not an nmt export (run nmt-export)") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ExportError(f"{folder}/{MANIFEST}: unreadable manifest ({err})") from None
    for name, digest in files.items():
        path = folder / name
        if not path.is_file():
            raise ExportError(f"{path}: missing from the export folder")
        if sha256_file(path) != digest:
            raise ExportError(f"{path}: altered since export (sha256 differs from {MANIFEST})")
    return manifest


class CTranslate2Engine:
    """Search with CTranslate2 over source ids, under the settings `nmt.decode` uses."""

    name = "ctranslate2"
    stops = ("finished",)

    def __init__(self, folder: Path, tokenizer: Tokenizer, quantization: str, device: torch.device,
                 max_positions: int) -> None:
        ct2 = _ctranslate2()
        _check_quantization(quantization, (device.type,))
        threads = torch.get_num_threads() if device.type == "cpu" else 1
        self.precision, self.device, self.max_positions = quantization, device, max_positions
        # One batch per thread, batches decoded side by side: faster than threads sharing each batch's matmuls
        # for models of this size (int8 beam 5 on 2 cores: 144 against 115 sentences/s).
        self.translator = ct2.Translator(str(folder), device=device.type, compute_type=quantization,
                                         inter_threads=threads, intra_threads=1)
        if device.type == "cpu":  # CTranslate2 sets the OpenMP thread count it shares with torch to intra_threads
            torch.set_num_threads(threads)
        self.tokenizer = tokenizer
        sp = spm.SentencePieceProcessor(model_proto=(folder / _spm_files(folder)[-1]).read_bytes())
        self.tgt_ids = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
        src = spm.SentencePieceProcessor(model_proto=(folder / _spm_files(folder)[0]).read_bytes())
        self.src_pieces = [src.id_to_piece(i) for i in range(src.get_piece_size())]
        self.eos = src.id_to_piece(EOS_ID)

    def search(self, sources: Sequence[np.ndarray], cfg: DecodeConfig,
               return_attention: bool = False) -> list[list[Hypothesis]]:
        if return_attention:
            raise ExportError("an exported model gives no attention weights (plots and statistics need a checkpoint)")
        results: list[list[Hypothesis]] = [[] for _ in sources]
        if not sources:
            return results
        mask = torch.ones(len(sources), max(len(s) for s in sources) + 1, dtype=torch.bool)  # (N, S)
        for row, ids in enumerate(sources):
            mask[row, len(ids) + 1:] = False
        limits = max_lengths(mask, cfg.max_len_a, cfg.max_len_b, self.max_positions).tolist()
        tokens = [[self.src_pieces[t] for t in ids.tolist()] + [self.eos] for ids in sources]
        # CTranslate2 sorts by length and cuts the batches itself, each thread decoding its own: batch_tokens / beam
        # source tokens per batch, so that a batch's beam rows hold about batch_tokens tokens (int8 beam 5 on 2
        # cores: 138 sentences/s with batches of 400 source tokens, 120 with 2,000). min_decoding_length 0: EOS may
        # come first (an empty output), as in nmt.decode; CTranslate2's default of 1 searches other hypotheses.
        outputs = self.translator.translate_batch(
            tokens, max_batch_size=max(1, cfg.batch_tokens // cfg.beam), batch_type="tokens", beam_size=cfg.beam,
            num_hypotheses=cfg.beam, length_penalty=cfg.alpha, max_decoding_length=max(limits) + 1,
            max_input_length=0, min_decoding_length=0, return_scores=True, return_end_token=True)
        cut: list[tuple[int, int, list[str]]] = []  # (sentence, rank, pieces) of outputs beyond their cap
        for i, (limit, out) in enumerate(zip(limits, outputs, strict=True)):
            for rank, (pieces, score) in enumerate(zip(out.hypotheses, out.scores, strict=True)):
                ids = [self.tgt_ids[p] for p in pieces if p != self.eos]
                results[i].append(Hypothesis(ids[:limit], 0.0, score * len(pieces) ** cfg.alpha))
                if len(ids) > limit:
                    cut.append((i, rank, pieces[:limit]))
        if cut:  # forced EOS at the cap, as nmt.decode does: score the cut outputs with their EOS
            scored = self.translator.score_batch([tokens[i] for i, _, _ in cut], [p for _, _, p in cut],
                                                 max_batch_size=cfg.batch_tokens, batch_type="tokens",
                                                 max_input_length=0)
            for (i, rank, _), result in zip(cut, scored, strict=True):
                results[i][rank].log_prob = float(sum(result.log_probs))
        for i, hyps in enumerate(results):  # CTranslate2 ranks by log_prob / length ** alpha; rank as nmt.decode
            for hyp in hyps:
                hyp.score = hyp.log_prob / gnmt_penalty(len(hyp.tokens) + 1, cfg.alpha)
            unique = {tuple(hyp.tokens): hyp for hyp in sorted(hyps, key=lambda hyp: hyp.score)}  # cut ones can meet
            results[i] = sorted(unique.values(), key=lambda hyp: -hyp.score)[:cfg.n_best]
        return results


def store_decode(folder: str | Path, changes: dict[str, Any]) -> None:
    """Write decoding settings into an export's manifest (checked first), atomically; the model files stay."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    manifest["config"]["decode"].update(changes)
    config_from_dict(manifest["config"])  # refuse settings the manifest could not load with
    with atomic_output(folder / MANIFEST) as handle:
        handle.write(json.dumps(manifest, indent=2) + "\n")


def load_export(folder: str | Path, device: torch.device, precision: str = "fp32") -> Translator:
    """A translator decoding with CTranslate2 from a checked export folder, with the run's decoding settings."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if precision != "fp32":
        raise ExportError(f"{folder}: an export decodes at the quantization it was exported with "
                          f"({manifest['quantization']}); --precision applies to checkpoints only")
    cfg = config_from_dict(manifest["config"])
    tokenizer = Tokenizer.load(folder)
    engine = CTranslate2Engine(folder, tokenizer, manifest["quantization"], device, cfg.model.max_positions)
    member = Member(str(folder), manifest["files"]["model.bin"], cfg.name, cfg.model.arch,
                    source_sha256=manifest["source_sha256"])
    return Translator(engine, tokenizer, cfg.decode, cfg.data.lowercase, [member], cfg)
