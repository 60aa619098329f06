"""The CTranslate2 engine and its export folder (with `nmt_export.json`: config and sha256 of every file).

It searches under `nmt.search`'s settings and re-ranks by the GNMT penalty; where more than `beam` hypotheses end
at once, or at the length cap, the two searches can differ. ctranslate2 is optional and imported when used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm
import torch

from nmt.config import DecodeConfig, config_from_dict
from nmt.engines import Abilities
from nmt.errors import ExportError
from nmt.fileio import atomic_output, sha256_file
from nmt.model_formats import QUANTIZATIONS
from nmt.search import Hypothesis, gnmt_penalty, max_lengths
from nmt.tokenizer import EOS_ID, JOINT_FILE, SRC_FILE, TGT_FILE

MANIFEST = "nmt_export.json"
FORMAT_VERSION = 1
NO_ATTENTION = "an exported model gives no attention weights (plots and statistics need a checkpoint)"
NO_GLOSSARY = ("the ctranslate2 engine does not support glossaries or constraints; translate with a checkpoint or run "
               "folder for them")


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or ExportError."""
    try:
        import ctranslate2
    except ImportError:
        raise ExportError("ctranslate2 is not installed; install the deploy extra: pip install 'nmt[deploy]'") from None
    return ctranslate2


def supported_quantizations(device: str) -> set[str]:
    """The quantizations CTranslate2 runs on `device` here."""
    ct2 = import_ctranslate2()
    if device == "cuda" and ct2.get_cuda_device_count() == 0:
        return set()
    return set(ct2.get_supported_compute_types(device))


def check_quantization(quantization: str, devices: Sequence[str]) -> None:
    """Refuse a quantization unknown or not runnable on `devices`."""
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization '{quantization}' is not one of {', '.join(QUANTIZATIONS)}")
    runnable = set().union(*(supported_quantizations(device) for device in devices))
    if quantization not in runnable:
        raise ExportError(f"quantization {quantization} cannot run on this machine ({'/'.join(devices)} runs "
                          f"{', '.join(sorted(runnable & set(QUANTIZATIONS))) or 'none'}); export and decode on a "
                          "machine that runs it")


def spm_files(folder: Path) -> list[str]:
    """A folder's sentencepiece models: joint, or source and target."""
    return [JOINT_FILE] if (folder / JOINT_FILE).is_file() else [SRC_FILE, TGT_FILE]


# ---------------------------------------------------------------------------------------------- the folder


def is_export(path: str | Path) -> bool:
    """Whether `path` is a CTranslate2 export folder."""
    path = Path(path)
    return path.is_dir() and ((path / MANIFEST).is_file() or (path / "model.bin").is_file())


def export_files(folder: str | Path) -> list[Path]:
    """The files its manifest lists, unchecked (none if unreadable)."""
    folder = Path(folder)
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
        return [folder / name for name in files if isinstance(name, str)]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The export's manifest, after checking every file's sha256."""
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


def store_decode(folder: str | Path, changes: dict[str, Any]) -> Path:
    """Write decoding settings into an export's manifest atomically; returns its path."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    manifest["config"]["decode"].update(changes)
    config_from_dict(manifest["config"])  # refuse settings it could not load
    with atomic_output(folder / MANIFEST) as handle:
        handle.write(json.dumps(manifest, indent=2) + "\n")
    return folder / MANIFEST


# ---------------------------------------------------------------------------------------------- decoding


def ranking_penalty(alpha: float, length: float) -> float:
    """The beta of CTranslate2's penalty length ** beta that ranks `length`-token hypotheses as GNMT's does
    (equal elasticity); 0 when alpha is."""
    return alpha * length / (5.0 + length)


class CTranslate2Engine:
    """Search with CTranslate2 over source ids, under the settings `nmt.search` uses."""

    name = "ctranslate2"
    abilities = Abilities(attention=False, n_best=True, stops=("finished",), devices=("cpu", "cuda"))
    parameter_count = None  # CTranslate2 does not say

    def __init__(self, folder: Path, quantization: str, device: torch.device, max_positions: int) -> None:
        ct2 = import_ctranslate2()
        check_quantization(quantization, (device.type,))
        threads = torch.get_num_threads() if device.type == "cpu" else 1
        self.precision, self.device, self.max_positions = quantization, device, max_positions
        # one batch per thread: a small model keeps one thread busy
        self.translator = ct2.Translator(str(folder), device=device.type, compute_type=quantization,
                                         inter_threads=threads, intra_threads=1)
        if device.type == "cpu":  # CTranslate2 sets the shared OpenMP thread count to intra_threads
            torch.set_num_threads(threads)
        sp = spm.SentencePieceProcessor(model_proto=(folder / spm_files(folder)[-1]).read_bytes())
        self.tgt_ids = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
        src = spm.SentencePieceProcessor(model_proto=(folder / spm_files(folder)[0]).read_bytes())
        self.src_pieces = [src.id_to_piece(i) for i in range(src.get_piece_size())]
        self.eos = src.id_to_piece(EOS_ID)

    def search(self, sources: Sequence[np.ndarray], cfg: DecodeConfig, return_attention: bool = False,
               constraints: Sequence[Sequence[np.ndarray]] | None = None, *,
               continuations: frozenset[int] = frozenset(),
               never_emit: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
        if return_attention:
            raise ExportError(NO_ATTENTION)
        if constraints is not None:
            raise ExportError(NO_GLOSSARY)
        if not all(len(ids) for ids in sources):
            searched = [i for i, ids in enumerate(sources) if len(ids)]
            found = iter(self.search([sources[i] for i in searched], cfg))
            return [next(found) if len(ids) else [] for ids in sources]
        results: list[list[Hypothesis]] = [[] for _ in sources]
        if not sources:
            return results
        mask = torch.ones(len(sources), max(len(s) for s in sources) + 1, dtype=torch.bool)  # (N, S)
        for row, ids in enumerate(sources):
            mask[row, len(ids) + 1:] = False
        limits = max_lengths(mask, cfg.max_len_a, cfg.max_len_b, self.max_positions).tolist()
        tokens = [[self.src_pieces[t] for t in ids.tolist()] + [self.eos] for ids in sources]
        # groups of equal cap, searched to cap + 1 (longer outputs are cut below), all queued at once
        by_limit: dict[int, list[int]] = {}
        for i, limit in enumerate(limits):
            by_limit.setdefault(limit, []).append(i)
        pending = []
        suppress = {"suppress_sequences": [[piece] for piece, i in self.tgt_ids.items() if i in never_emit]
                    } if never_emit else {}
        for limit, rows in by_limit.items():
            beta = ranking_penalty(cfg.alpha, sum(len(sources[i]) + 1 for i in rows) / len(rows))
            futures = self.translator.translate_batch(
                [tokens[i] for i in rows], max_batch_size=max(1, cfg.batch_tokens // cfg.beam), batch_type="tokens",
                beam_size=cfg.beam, num_hypotheses=cfg.beam, length_penalty=beta, max_decoding_length=limit + 1,
                max_input_length=0, min_decoding_length=0, return_scores=True, return_end_token=True,
                asynchronous=True, **suppress)
            pending.append((rows, beta, futures))
        outputs: list[Any] = [None] * len(sources)
        betas = [0.0] * len(sources)
        for rows, beta, futures in pending:
            for i, future in zip(rows, futures, strict=True):
                outputs[i], betas[i] = future.result(), beta
        cut: list[tuple[int, int, list[str]]] = []  # (sentence, rank, pieces) past the cap
        for i, (limit, out, beta) in enumerate(zip(limits, outputs, betas, strict=True)):
            for rank, (pieces, score) in enumerate(zip(out.hypotheses, out.scores, strict=True)):
                ids = [self.tgt_ids[p] for p in pieces if p != self.eos]
                results[i].append(Hypothesis(ids[:limit], 0.0, score * len(pieces) ** beta))
                if len(ids) > limit:
                    cut.append((i, rank, pieces[:limit]))
        if cut:  # EOS forced at the cap, as in nmt.search
            scored = self.translator.score_batch([tokens[i] for i, _, _ in cut], [p for _, _, p in cut],
                                                 max_batch_size=cfg.batch_tokens, batch_type="tokens",
                                                 max_input_length=0)
            for (i, rank, _), result in zip(cut, scored, strict=True):
                results[i][rank].log_prob = float(sum(result.log_probs))
        for i, hyps in enumerate(results):  # rank as nmt.search
            for hyp in hyps:
                hyp.score = hyp.log_prob / gnmt_penalty(len(hyp.tokens) + 1, cfg.alpha)
            unique = {tuple(hyp.tokens): hyp for hyp in sorted(hyps, key=lambda hyp: hyp.score)}  # cuts may coincide
            results[i] = sorted(unique.values(), key=lambda hyp: -hyp.score)[:cfg.n_best]
        return results

    def layer_attention(self, src: np.ndarray, tokens: Sequence[int]) -> list[tuple[str, torch.Tensor]]:
        raise ExportError(NO_ATTENTION)
