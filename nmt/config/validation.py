"""The checks of a whole config that need more than one key, run at load time before any data is read."""

from __future__ import annotations

import re

from nmt.config.decoding import check_decode
from nmt.config.fields import ConfigError
from nmt.config.model import check_model
from nmt.config.sections import Config, DataConfig
from nmt.yamlsafe import short_repr

FILES_KEYS = ("train_src", "train_tgt", "val_src", "val_tgt", "test_src", "test_tgt")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def validate(cfg: Config) -> None:
    """Cross-field checks that need more than one key."""
    if not _NAME_RE.fullmatch(cfg.name):
        raise ConfigError(f"name: {short_repr(cfg.name)} must be letters, digits, '_', '-' or '.', not starting with "
                          "a dot (it names a folder under run_root)")
    check_model(cfg.model, cfg.data.max_tokens, cfg.tokenizer.joint)
    check_decode(cfg.decode)
    tr = cfg.train
    if len(tr.betas) != 2:
        raise ConfigError("train.betas: expected two numbers")
    if tr.schedule in ("noam", "inverse_sqrt") and tr.warmup <= 0:
        raise ConfigError(f"train.warmup: schedule '{tr.schedule}' needs a positive warmup")
    if tr.max_steps <= 0 and tr.max_epochs <= 0 and tr.max_minutes <= 0:
        raise ConfigError("train: set at least one of max_steps, max_epochs, max_minutes")
    _validate_data(cfg.data)


def validate_new_run(cfg: Config) -> None:
    """Checks for a config a run starts from, not applied to the configs stored in earlier checkpoints (which
    load as they were written): settings that would be ignored or cut short."""
    tr, data = cfg.train, cfg.data
    if tr.average_last > tr.keep_best:
        raise ConfigError(f"train.average_last ({tr.average_last}) cannot exceed train.keep_best ({tr.keep_best}): "
                          "only the best keep_best checkpoints are kept to average")
    if data.dataset != "files":
        for key in (*FILES_KEYS, "train_corpora"):
            if getattr(data, key):
                raise ConfigError(f"data.{key}: only read when data.dataset is 'files', "
                                  f"not '{data.dataset}' (remove it or set data.dataset: files)")


def _validate_data(data: DataConfig) -> None:
    """Where the training text comes from: old keys, several corpora, or both."""
    for i, entry in enumerate(data.train_corpora):
        if len(entry) not in (1, 2) or not all(entry):
            raise ConfigError(f"data.train_corpora[{i}]: expected [source, target] or [file.tsv], "
                              f"got {short_repr(entry)}")
    if data.dataset == "files":
        if bool(data.train_src) != bool(data.train_tgt) or not (data.train_src or data.train_corpora):
            key = "train_tgt" if data.train_src else "train_src"
            raise ConfigError(f"data.{key}: required when data.dataset is 'files' (or list data.train_corpora)")
        for key in ("val_src", "val_tgt"):
            if not getattr(data, key):
                raise ConfigError(f"data.{key}: required when data.dataset is 'files'")
