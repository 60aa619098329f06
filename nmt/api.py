"""The public API: the console commands as functions, raising `nmt.NmtError`s and never exiting.

    run = nmt.train("configs/sample_transformer.yaml", overrides={"train.max_steps": 100})
    nmt.load(run.path, device="cpu", beam=5).translate("Ein Hund läuft.")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nmt.config import ConfigSource, Overrides, as_overrides, load_config
from nmt.errors import ConfigError, ExportError
from nmt.glossary import GlossaryLike, as_glossary
from nmt.loader import load_translator
from nmt.model_formats import EXPORT_FORMATS
from nmt.run.lifecycle import Run, train_run
from nmt.translator import Translator

Models = str | Path | Sequence[str | Path]  # a list is an ensemble


def train(config: ConfigSource, overrides: Overrides | None = None, restart: bool = False,
          evaluate_test: bool = True) -> Run:
    """Prepare the data, train (or resume), choose the final model and score it on the test split.

    `config` and `overrides` are as for `nmt.load_config`; `restart` deletes an earlier run of the same name.
    Ctrl-C saves last.pt and raises `nmt.TrainingInterrupted`. Under torchrun every rank calls this.
    """
    changes = as_overrides(overrides, "nmt.train")
    cfg = load_config(config, changes)
    return train_run(cfg, restart, evaluate_test, command=_call("nmt.train", config, changes))


def load(model: Models, *, device: str | torch.device = "auto", precision: str = "fp32",
         **decoding: Any) -> Translator:
    """A Translator for a run folder, checkpoint or CTranslate2 export (a list: an ensemble); `decoding` takes
    decode.* settings (beam, length_penalty, ...) over the model's own."""
    return load_translator(_models(model), device, precision, decoding)


def translate_file(model: Models | Translator, source: str | Path, output: str | Path, *, chunk_lines: int = 2000,
                   split_sentences: str | bool = "on", glossary: GlossaryLike = None, scores: bool = False,
                   device: str | torch.device = "auto", **decoding: Any) -> int:
    """Translate the text file `source` line by line into `output`, as nmt-translate -i -o does; returns the line
    count. `model` is what `load` takes, or a Translator. A stopped call leaves OUTPUT.partial: the same call goes
    on after its last finished chunk of `chunk_lines` lines; `output` appears only when whole."""
    from nmt.fileio import check_input, check_output
    from nmt.stream import Stream
    from nmt.stream import translate_file as stream_file

    if not isinstance(chunk_lines, int) or isinstance(chunk_lines, bool) or chunk_lines < 1:
        raise ConfigError(f"chunk_lines: got {chunk_lines!r}, expected a whole number of at least 1")
    check_output("output", output, [("source", check_input("source", source))])
    translator = (model.with_decode(**decoding) if isinstance(model, Translator)
                  else load(model, device=device, **decoding))
    stream = Stream(translator, chunk_lines, scores, split_sentences=split_sentences, glossary=as_glossary(glossary))
    return stream_file(stream, str(source), str(output))


def evaluate(model: Models, *, split: str = "test",
             src: str | Path | None = None, ref: str | Path | None = None, device: str | torch.device = "auto",
             precision: str = "fp32", **decoding: Any) -> dict[str, Any]:
    """nmt-evaluate's sacreBLEU report for a split or `src`/`ref` files, with the translations under
    "hypotheses"; nothing is written."""
    from nmt.data import read_pair
    from nmt.evaluation import evaluate as score_translations
    from nmt.evaluation import split_pair

    if (src is None) != (ref is None):
        raise ConfigError("src and ref go together")
    translator = load(model, device=device, precision=precision, **decoding)
    if src is not None:
        name, (sources, refs) = f"file_{Path(src).stem}", read_pair(Path(src), Path(ref))
    else:
        name, (sources, refs) = split, split_pair(translator.cfg, split)
    report, hyps = score_translations(translator, sources, refs, name, _call("nmt.evaluate", model, {}))
    return report | {"hypotheses": hyps}


def export_model(model: str | Path, *, format: str = "ctranslate2", output: str | Path,
                 **options: Any) -> dict[str, Any]:
    """Export a Transformer to a new folder `output` as "ctranslate2" (option `quantization`) or "huggingface",
    as nmt-export does; returns the manifest."""
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
    """Convert a Hugging Face folder (nmt or Marian) into checkpoint `output`, as nmt-import does; returns the
    manifest."""
    from nmt.interop.hf_import import import_huggingface

    return import_huggingface(folder, output)


def _models(model: Models) -> list[str | Path]:
    return list(model) if isinstance(model, (list, tuple)) else [model]


def _call(function: str, subject: Any, overrides: Overrides) -> str:
    """How a report records a call from Python."""
    shown = str(subject) if isinstance(subject, (str, Path)) else type(subject).__name__
    return f"{function}({shown!r}{f', overrides={dict(overrides)!r}' if overrides else ''})"


__all__ = ["Run", "Translator", "evaluate", "export_model", "import_model", "load", "train"]
