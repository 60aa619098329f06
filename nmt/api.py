"""The public API, for notebooks and scripts: what the console commands do, as functions.

    import nmt
    run = nmt.train("configs/sample_transformer.yaml", overrides={"train.max_steps": 100})
    translator = nmt.load(run.path, device="cpu", beam=5)
    translator.translate("Ein Hund läuft.")

Each raises the library's own errors (`nmt.ConfigError`, `nmt.CheckpointError`, ...: all `nmt.NmtError`), never
exits the process and leaves the root logger and the signal handlers as it found them.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nmt.config import ConfigSource, Overrides, as_overrides, load_config
from nmt.errors import ConfigError, ExportError
from nmt.model_formats import EXPORT_FORMATS
from nmt.run import Run, train_run
from nmt.translator import Translator, load_translator

Models = str | Path | Sequence[str | Path]  # one model, or a list (or tuple) of them: an ensemble
_DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")


def train(config: ConfigSource, overrides: Overrides | None = None, restart: bool = False,
          evaluate_test: bool = True) -> Run:
    """Prepare the data (cached), train (or resume), choose the final model and score it on the test split; the
    Run names the final model always, and holds the test report where the corpus has a test split.

    `config` and `overrides` are as for `nmt.load_config` (`overrides={"train.max_steps": 60}`). `restart` deletes
    an earlier run of the same name; `evaluate_test` False skips the test report. Ctrl-C saves last.pt and raises
    `nmt.TrainingInterrupted`, which says how to resume; training the same config again resumes exactly. Under
    torchrun every rank calls this.
    """
    changes = as_overrides(overrides, "nmt.train")
    cfg = load_config(config, changes)
    return train_run(cfg, restart, evaluate_test, command=_call("nmt.train", config, changes))


def load(model: Models, *more: str | Path, device: str | torch.device = "auto",
         precision: str = "fp32", **decoding: Any) -> Translator:
    """A Translator for a run folder (its final model), a checkpoint file or a CTranslate2 export folder; a list
    of models decodes as an ensemble. `device` is auto, cpu, cuda, cuda:N or a torch.device. `decoding` takes the
    decode.* settings (beam, length_penalty, max_len_a, ...), which override the ones stored with the model.
    Several positional models (`load(a, b)`) are deprecated: write `load([a, b])`."""
    return load_translator(_models("load", model, more), device, precision, decoding)


def evaluate(model: Models, *more: str | Path, split: str = "test",
             src: str | Path | None = None, ref: str | Path | None = None, device: str | torch.device = "auto",
             precision: str = "fp32", **decoding: Any) -> dict[str, Any]:
    """The sacreBLEU report nmt-evaluate writes (BLEU, chrF, TER, signatures, settings, speed), for a split of
    the model's dataset or for `src` and `ref` files; the translations are under "hypotheses". A list of models
    is an ensemble (several positional ones are deprecated, as for `load`). Nothing is written to disk."""
    from nmt.data import read_pair
    from nmt.evaluation import evaluate as score_translations
    from nmt.evaluation import split_pair

    if (src is None) != (ref is None):
        raise ConfigError("src and ref go together")
    models = _models("evaluate", model, more)
    translator = load(models, device=device, precision=precision, **decoding)
    if src is not None:
        name, (sources, refs) = f"file_{Path(src).stem}", read_pair(Path(src), Path(ref))
    else:
        name, (sources, refs) = split, split_pair(translator.cfg, split)
    report, hyps = score_translations(translator, sources, refs, name, _call("nmt.evaluate", model, {}))
    return report | {"hypotheses": hyps}


def export_model(model: str | Path, *, format: str = "ctranslate2", output: str | Path,
                 **options: Any) -> dict[str, Any]:
    """Convert a Transformer (a run folder's final model or a checkpoint file) into a new folder `output`, as
    nmt-export does: `format` "ctranslate2" (the deploy extra; option `quantization`, default float32) or
    "huggingface" (the hf extra; a folder transformers loads with its stock classes). Returns the manifest
    written beside the files."""
    from nmt.export import export_ctranslate2

    if format not in EXPORT_FORMATS:
        raise ExportError(f"format {format!r}: unknown export format (known: {', '.join(EXPORT_FORMATS)})")
    allowed = {"ctranslate2": {"quantization"}, "huggingface": set()}[format]
    if unknown := sorted(set(options) - allowed):
        raise ExportError(f"export_model: {', '.join(unknown)} does not apply to format {format} "
                          f"(options: {', '.join(sorted(allowed)) or 'none'})")
    if format == "huggingface":
        from nmt.interop.hf_export import export_huggingface

        return export_huggingface(model, output)
    return export_ctranslate2(model, output, **options)


def import_model(folder: str | Path, *, output: str | Path) -> dict[str, Any]:
    """Convert a Hugging Face folder (an nmt export, or a Marian/OPUS-MT model; the hf extra) into an nmt
    checkpoint file `output` that `load` reads, as nmt-import does. Returns the manifest it wrote."""
    from nmt.interop.hf_import import import_huggingface

    return import_huggingface(folder, output)


def _models(function: str, model: Models, more: Sequence[Any]) -> list[str | Path]:
    """The models of a call: one path or a list/tuple of them, and any (deprecated) further positional ones; a
    device name in second place is a mistake for `device=`."""
    for extra in more:
        if isinstance(extra, torch.device) or (isinstance(extra, str) and _DEVICE_NAME.fullmatch(extra)):
            raise TypeError(f"nmt.{function}: {extra!r} in second place would be a second model; "
                            f"write device={str(extra)!r}")
    if more:
        warnings.warn(f"nmt.{function}(a, b, ...) with several positional models is deprecated; pass a list: "
                      f"nmt.{function}([a, b, ...])", DeprecationWarning, stacklevel=3)
    return [*(model if isinstance(model, (list, tuple)) else [model]), *more]


def _call(function: str, subject: Any, overrides: Overrides) -> str:
    """How a report records a call from Python (the command line of a console command, for the CLI)."""
    shown = str(subject) if isinstance(subject, (str, Path)) else type(subject).__name__
    return f"{function}({shown!r}{f', overrides={dict(overrides)!r}' if overrides else ''})"


__all__ = ["Run", "Translator", "evaluate", "export_model", "import_model", "load", "train"]
