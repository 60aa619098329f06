"""Fine-tuning (`train.init_from`): the parent model a child run starts from, and the child's config.

The child takes the parent's weights, tokenizer and model settings (except dropout); training state starts anew.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import find_checkpoint, load_contents
from nmt.config import Config, ModelConfig, config_from_dict, to_dict
from nmt.engines.ctranslate2 import is_export
from nmt.errors import CheckpointError, ConfigError, ExportError, TokenizerError
from nmt.fileio import sha256_file
from nmt.tokenizer import Tokenizer

TRAINING_ONLY = ("dropout", "attention_dropout")  # a child may set these


@dataclass
class Parent:
    """The model a child run starts from."""

    path: Path  # the checkpoint file
    sha256: str
    cfg: Config
    tokenizer: Tokenizer
    weights: dict[str, torch.Tensor]

    def record(self) -> dict[str, Any]:
        """What the child records of its parent."""
        return {"path": str(self.path), "sha256": self.sha256}

    def child_config(self, cfg: Config) -> Config:
        """`cfg` with the parent's model and tokenizer settings; ConfigError for a model key set otherwise."""
        defaults, mine, theirs = to_dict(ModelConfig()), to_dict(cfg.model), to_dict(self.cfg.model)
        for key, value in mine.items():
            if key in TRAINING_ONLY or value == theirs.get(key) or value == defaults.get(key):
                continue
            raise ConfigError(f"model.{key}: {value!r} differs from the parent's {theirs.get(key)!r} "
                              f"(train.init_from {self.path}); a child keeps its parent's model settings")
        if cfg.data.lowercase != self.cfg.data.lowercase:
            raise ConfigError(f"data.lowercase: {cfg.data.lowercase} differs from the parent's "
                              f"{self.cfg.data.lowercase} (train.init_from {self.path}): the child must read "
                              "text normalized as its parent's was")
        model = {**theirs, **{key: mine[key] for key in TRAINING_ONLY}}
        inherited = config_from_dict({"model": model, "tokenizer": to_dict(self.cfg.tokenizer)})
        return dataclasses.replace(cfg, model=inherited.model, tokenizer=inherited.tokenizer)


def load_parent(cfg: Config) -> Parent:
    """The parent `cfg.train.init_from` names (a run folder or checkpoint)."""

    given = cfg.train.init_from
    if is_export(given):
        raise ExportError(f"train.init_from {given}: an exported model holds no weights that train; give the run "
                          "folder or checkpoint it was exported from")
    try:
        path = find_checkpoint(given)
    except CheckpointError as err:
        raise CheckpointError(f"train.init_from: {err}") from None
    bundle = load_contents(path)
    try:
        parent_cfg = config_from_dict(bundle.config)
        tokenizer = Tokenizer.from_bytes(bundle.tokenizer)
    except (ConfigError, TokenizerError) as err:
        raise CheckpointError(f"train.init_from {path}: its config or tokenizer cannot be read ({err})") from None
    return Parent(path, sha256_file(path), parent_cfg, tokenizer, bundle.model)
