"""nmt: a German-English neural machine translation trainer.

The public API (see docs/python.md): `load` a model and translate (`translate_file` for files), `train` from a
config, `evaluate` a model, `load_config`, `export_model`, `import_model` and `load_glossary`; the types
`Translator`, `Run`, `Config`, `Glossary`; and the error types, all subclasses of `NmtError`.
Importing nmt is cheap: `load_config` and the types of the config need no torch; torch is imported when a
function that needs it is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from nmt.config import Config, load_config
from nmt.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    ExportError,
    FileError,
    MarkupError,
    NmtError,
    RunLockError,
    TokenizerError,
    TrainingError,
    TrainingInterrupted,
)

__version__ = "0.1.0"

# Names that import torch, each from its module, on first use.
_LAZY = {"load": "nmt.api", "train": "nmt.api", "evaluate": "nmt.api", "translate_file": "nmt.api",
         "export_model": "nmt.api", "import_model": "nmt.api",
         "Translator": "nmt.translator", "Run": "nmt.run.lifecycle", "Glossary": "nmt.glossary",
         "load_glossary": "nmt.glossary"}

__all__ = ["CheckpointError", "Config", "ConfigError", "DataError", "ExportError", "FileError", "Glossary",
           "MarkupError",
           "NmtError", "Run", "RunLockError", "TokenizerError", "TrainingError", "TrainingInterrupted", "Translator",
           "__version__", "evaluate", "export_model", "import_model", "load", "load_config", "load_glossary",
           "train", "translate_file"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
