"""The one loader of a model (run folders, checkpoints, an ensemble, or a CTranslate2 export) as a `Translator`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import LoadedModel, load_model
from nmt.config import DecodeConfig, config_from_dict, decode_with
from nmt.engines.ctranslate2 import MANIFEST, CTranslate2Engine, export_files, is_export, read_manifest
from nmt.engines.pytorch import TorchEngine
from nmt.errors import CheckpointError, ConfigError, ExportError
from nmt.fileio import sha256_file
from nmt.run.folder import RunDir
from nmt.search import Ensemble
from nmt.tokenizer import Tokenizer
from nmt.translator import Member, Translator, check_abilities
from nmt.utils import resolve_device


def member_of(loaded: LoadedModel) -> Member:
    """How the reports name a loaded checkpoint."""
    progress = loaded.progress
    minutes = round(progress["elapsed"] / 60, 2) if "elapsed" in progress else None
    return Member(str(loaded.path), sha256_file(loaded.path), loaded.cfg.name, loaded.cfg.model.arch,
                  progress.get("step"), minutes)


def from_loaded(loaded: Sequence[LoadedModel], device: torch.device, precision: str = "fp32",
                decode: DecodeConfig | None = None) -> Translator:
    """A PyTorch translator over one model or an ensemble (sharing a tokenizer); `decode` defaults to the first's."""
    first = loaded[0]
    for other in loaded[1:]:
        if other.tokenizer.identity != first.tokenizer.identity:
            raise CheckpointError(f"{other.path}: its vocabulary differs from {first.path}'s; ensemble members "
                                  "must share the tokenizer")
        if other.cfg.data.lowercase != first.cfg.data.lowercase:
            raise CheckpointError(f"{other.path}: data.lowercase differs from {first.path}'s; ensemble members "
                                  "must read the same normalized text")
        if other.cfg.data.languages != first.cfg.data.languages:
            raise CheckpointError(f"{other.path}: translates {other.cfg.data.direction}, {first.path} "
                                  f"{first.cfg.data.direction}; ensemble members must translate the same way")
    model = first.model if len(loaded) == 1 else Ensemble([item.model for item in loaded]).to(device)
    return Translator(TorchEngine(model, device, precision), first.tokenizer, decode or first.cfg.decode,
                      first.cfg.data.lowercase, [member_of(item) for item in loaded], first.cfg)


def from_export(folder: str | Path, device: torch.device, precision: str = "fp32") -> Translator:
    """A CTranslate2 translator from a checked export folder, with the run's decoding settings."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if precision != "fp32":
        raise ExportError(f"{folder}: an export decodes at the quantization it was exported with "
                          f"({manifest['quantization']}); --precision applies to checkpoints only")
    cfg = config_from_dict(manifest["config"])
    tokenizer = Tokenizer.load(folder)
    engine = CTranslate2Engine(folder, manifest["quantization"], device, cfg.model.max_positions)
    member = Member(str(folder), manifest["files"]["model.bin"], cfg.name, cfg.model.arch,
                    source_sha256=manifest["source_sha256"])
    return Translator(engine, tokenizer, cfg.decode, cfg.data.lowercase, [member], cfg)


def model_inputs(path: str | Path) -> list[tuple[str, Path]]:
    """The files the loader may read of a model, named for path checks."""
    given = Path(path)
    if is_export(given):
        return [("exported model", p) for p in export_files(given)] + [("export manifest", given / MANIFEST)]
    if given.is_dir():
        return [("checkpoint", p) for p in RunDir(given).finals()]
    return [("checkpoint", given)]


def load_translator(paths: str | Path | Sequence[str | Path], device: str | torch.device = "auto",
                    precision: str = "fp32", changes: dict[str, Any] | None = None,
                    label: Callable[[str], str] = lambda key: f"decode.{key}") -> Translator:
    """A translator for run folders, checkpoint files (several: an ensemble) or one CTranslate2 export folder.

    `device`: auto, cpu, cuda, cuda:N or a torch.device. `changes` (None ignored) override the stored decoding
    settings and are validated, `label` naming the offending setting.
    """

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths or not all(isinstance(p, (str, Path)) for p in paths):
        raise CheckpointError("give a model: a run folder, checkpoint file or export folder (a str or Path)")
    device = resolve_device(device)
    exports = [p for p in paths if is_export(p)]
    if exports and len(paths) > 1:
        raise CheckpointError(f"{exports[0]}: an exported model cannot be part of an ensemble")
    kind = CTranslate2Engine if exports else TorchEngine
    if device.type not in kind.abilities.devices:
        raise ConfigError(f"device {device.type}: the {kind.name} engine decodes on "
                          f"{' or '.join(kind.abilities.devices)} only")
    if exports:
        translator = from_export(paths[0], device, precision)
    else:
        translator = from_loaded([load_model(p, device) for p in paths], device, precision)
    decode = decode_with(translator.decode, changes or {}, label)
    check_abilities(translator.engine, decode, label)
    return translator.with_decode(decode)
