"""Score a translator's output with sacrebleu and write reproducible evaluation reports.

References are normalized as the sources are, so `nmt-evaluate` on a run gives the figures `nmt-train` reported.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from nmt.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from nmt.config import TUNED_PENALTIES, UNTUNED_PENALTY, Config, config_from_dict, to_dict
from nmt.data import evaluation_files, evaluation_splits, read_pair
from nmt.engines.ctranslate2 import is_export, store_decode
from nmt.errors import ConfigError, DataError, short_repr
from nmt.fileio import atomic_output, check_output, sha256_file, write_json
from nmt.run.folder import RunDir
from nmt.translator import Translator


class Scorer:
    """BLEU, lowercased BLEU, chrF and TER against one set of references (tokenized once), with signatures."""

    def __init__(self, refs: list[str]) -> None:
        self.metrics = {
            "bleu": sacrebleu.metrics.BLEU(references=[refs]),
            "bleu_lc": sacrebleu.metrics.BLEU(lowercase=True, references=[refs]),
            "chrf": sacrebleu.metrics.CHRF(references=[refs]),
            "ter": sacrebleu.metrics.TER(references=[refs]),
        }

    def __call__(self, hyps: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, metric in self.metrics.items():
            result = metric.corpus_score(hyps, None)
            out[name] = round(result.score, 2)
            out[f"{name}_signature"] = str(metric.get_signature())
            if name == "bleu":
                out["bleu_detail"] = str(result)  # n-gram precisions, brevity penalty, lengths
        return out


def score(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """BLEU, lowercased BLEU, chrF and TER with their sacrebleu signatures."""
    return Scorer(refs)(hyps)


def split_pair(cfg: Config, split: str) -> tuple[list[str], list[str]]:
    """Sources and references of a split of the config's dataset, as in its files (not normalized)."""
    files = evaluation_files(cfg, split, log=lambda _msg: None)
    if files is None:
        raise DataError(f"split {short_repr(split)}: the dataset of {cfg.name} has the splits "
                        f"{', '.join(evaluation_splits(cfg))}")
    return read_pair(*files)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def evaluate(translator: Translator, sources: list[str], refs: list[str], split: str = "test",
             command: str = "") -> tuple[dict[str, Any], list[str]]:
    """Translate `sources`, score against `refs` (both normalized as in training); the report and hypotheses."""
    engine = translator.engine
    _sync(engine.device)
    start = time.perf_counter()
    nbest = translator.hypotheses(sources)
    _sync(engine.device)
    seconds = time.perf_counter() - start
    hyps = [translator.detokenize(found[0]) if found else "" for found in nbest]
    out_tokens = sum(len(found[0].tokens) + 1 for found in nbest if found)  # each with its EOS
    first, cfg = translator.members[0], translator.cfg
    device = engine.device
    report = {
        "split": split,
        "sentences": len(sources),
        "scores": score(hyps, [translator.normalize(r) for r in refs]),
        "note": "bleu_lc is sacrebleu -lc (13a tokenizer), the closest match to the lowercased tokenized BLEU "
                "many papers and tutorials quote",
        **translator.settings(),
        "command": command,
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(sources) / seconds, 2),
        "tgt_tokens_per_s": round(out_tokens / seconds, 1),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} "
                                                                                   "threads)",
        "checkpoint": first.path,
        "checkpoint_sha256": first.sha256,
        "config_sha256": hashlib.sha256(json.dumps(to_dict(cfg), sort_keys=True).encode()).hexdigest(),
        "experiment": cfg.name,
        "parameters": engine.parameter_count,
        # training progress when the checkpoint was written (the latest of an average)
        "checkpoint_progress": {"steps": first.steps, "minutes": first.minutes},
        "tokenizer_id": translator.tokenizer.identity,
    }
    return report, hyps


def write_report(report: dict[str, Any], hyps: list[str], json_path: Path, hyp_path: Path) -> None:
    """Write the hypotheses and JSON report as a pair: a failure while writing either leaves both as they were."""
    with atomic_output(json_path) as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())  # a full disk fails before the hypotheses replace anything
        with atomic_output(hyp_path) as hyp_handle:
            hyp_handle.writelines(h + "\n" for h in hyps)


def summary(report: dict[str, Any]) -> str:
    """A few human-readable lines."""
    s = report["scores"]
    return "\n".join([
        f"{report['experiment']} on {report['split']} ({report['sentences']} sentences, {report['device']})",
        f"  BLEU     {s['bleu']:6.2f}   {s['bleu_signature']}",
        f"  BLEU-lc  {s['bleu_lc']:6.2f}   {s['bleu_lc_signature']}  (lowercased)",
        f"  chrF     {s['chrf']:6.2f}   {s['chrf_signature']}",
        f"  TER      {s['ter']:6.2f}   {s['ter_signature']}",
        f"  speed    {report['sentences_per_s']:.1f} sentences/s, {report['tgt_tokens_per_s']:.0f} target tokens/s "
        f"(beam {report['decode']['beam']}, {report['engine']} {report['precision']})",
    ])


TUNING_SUMMARY = ("split", "sentences", "beam", "stop", "searches", "seconds", "bleu_signature", "table", "best")


def tune_length_penalty(translator: Translator, penalties: Sequence[float] = TUNED_PENALTIES) -> dict[str, Any]:
    """Validation BLEU at each length penalty (a search each), and the best one (ties: nearest UNTUNED_PENALTY)."""
    sources, refs = split_pair(translator.cfg, "val")
    refs = [translator.normalize(r) for r in refs]
    decode = translator.decode
    start = time.perf_counter()
    outputs = {}
    for alpha in penalties:
        tuned = translator.with_decode(n_best=1, length_penalty=alpha)
        outputs[alpha] = [tuned.detokenize(found[0]) if found else "" for found in tuned.hypotheses(sources)]
    seconds = time.perf_counter() - start
    bleu = sacrebleu.metrics.BLEU()
    table = [{"length_penalty": alpha, "bleu": round(bleu.corpus_score(hyps, [refs]).score, 2)}
             for alpha, hyps in outputs.items()]
    best = max(table, key=lambda row: (row["bleu"], -abs(row["length_penalty"] - UNTUNED_PENALTY)))
    settings = translator.settings()
    del settings["decode"]["length_penalty"]  # the table lists them
    return {"split": "val", "sentences": len(sources), "beam": decode.beam, "stop": decode.stop,
            "searches": len(penalties), "seconds": round(seconds, 3), "bleu_signature": str(bleu.get_signature()),
            "table": table, "best": best["length_penalty"], **settings}


def store_length_penalty(model: str | Path, alpha: float) -> Path:
    """Write `alpha` atomically into a checkpoint's or export manifest's decoding settings; the file written."""
    if is_export(model):
        return store_decode(model, {"length_penalty": alpha})
    path = find_checkpoint(model)
    payload = load_checkpoint(path)
    payload["config"]["decode"]["length_penalty"] = alpha
    config_from_dict(payload["config"])  # must still load
    save_checkpoint(payload, path)
    return path


def tune_and_store(translator: Translator, model: str | Path) -> dict[str, Any]:
    """Tune `model`'s length penalty on the validation split and store the best in it; the tuning report."""
    tuning = tune_length_penalty(translator)
    stored = store_length_penalty(model, tuning["best"])
    return tuning | {"stored_in": str(stored), "stored_sha256": sha256_file(stored)}


def penalty_table(tuning: dict[str, Any]) -> str:
    """The tuning table as Markdown, the chosen penalty in bold."""
    lines = [f"| length penalty | {tuning['split']} BLEU (beam {tuning['beam']}, stop: {tuning['stop']}) |",
             "|---:|---:|"]
    for row in tuning["table"]:
        mark = "**" if row["length_penalty"] == tuning["best"] else ""
        lines.append(f"| {mark}{row['length_penalty']:g}{mark} | {mark}{row['bleu']:.2f}{mark} |")
    return "\n".join(lines)


def report_paths(model: str, name: str, output: str | None, language: str) -> tuple[Path, Path]:
    """Where nmt-evaluate writes `name`'s report and hypotheses: at --output, else in `model`'s run folder."""
    if output:
        return Path(output), Path(output).with_suffix(".hyp.txt")
    run = RunDir.of(model)
    return run.report(name), run.hypotheses(name, language)


def check_tuning(split: str, src: str | None, models: int, length_penalty: float | None, output: str | None) -> None:
    """--tune-length-penalty needs the validation split and no given penalty; an ensemble, a report path."""
    if split != "val" or src:
        raise ConfigError("--tune-length-penalty: the penalty is chosen on the validation split only; give "
                          "--split val (and no --src/--ref)")
    if models > 1 and not output:
        raise ConfigError("--tune-length-penalty: an ensemble has no checkpoint of its own to store the penalty "
                          "in; give --output REPORT (and decode the ensemble with --length-penalty)")
    if length_penalty is not None:
        raise ConfigError("--tune-length-penalty: it chooses the length penalty; leave out --length-penalty")


def tune_command(translator: Translator, model: str, output: str | None, inputs: list[tuple[str, Path]],
                 command: str) -> str:
    """nmt-evaluate --tune-length-penalty: tune, store (one model; an ensemble has nowhere to), write the report
    to `output`; returns what to print."""
    out = Path(output) if output else RunDir.of(model).length_penalty
    check_output("report", out, inputs)
    ensemble = len(translator.members) > 1
    tuning = tune_length_penalty(translator) if ensemble else tune_and_store(translator, model)
    write_json(out, tuning | {"command": command})
    kept = (f"for this ensemble: decode it with --length-penalty {tuning['best']:g}" if ensemble
            else f"stored in {tuning['stored_in']}")
    return f"{penalty_table(tuning)}\nlength penalty {tuning['best']:g} {kept}; report: {out}"
