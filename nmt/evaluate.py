"""Score a translator's output with sacrebleu and write evaluation reports that say how to reproduce them.

Sources go through the `Translator` (normalized as the training data was); references are normalized the same
way, as validation and the end-of-training report see them, so `nmt-evaluate` on a run gives the figures of
the report `nmt-train` wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from nmt.config import ConfigError, to_dict
from nmt.data import read_pair, resolve_files
from nmt.models import count_parameters
from nmt.translator import TorchEngine, Translator
from nmt.utils import atomic_output


def score(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """BLEU, lowercased BLEU, chrF and TER with their sacrebleu signatures."""
    metrics = {
        "bleu": sacrebleu.metrics.BLEU(),
        "bleu_lc": sacrebleu.metrics.BLEU(lowercase=True),
        "chrf": sacrebleu.metrics.CHRF(),
        "ter": sacrebleu.metrics.TER(),
    }
    out: dict[str, Any] = {}
    for name, metric in metrics.items():
        result = metric.corpus_score(hyps, [refs])
        out[name] = round(result.score, 2)
        out[f"{name}_signature"] = str(metric.get_signature())
        if name == "bleu":
            out["bleu_detail"] = str(result)  # n-gram precisions, brevity penalty, lengths
    return out


def split_pair(translator: Translator, split: str) -> tuple[list[str], list[str]]:
    """Sources and references of a split of the run's dataset, read from its files."""
    files = resolve_files(translator.cfg, log=lambda _msg: None)
    if split not in files:
        raise ConfigError(f"--split {split}: the run's dataset has splits {', '.join(files)}")
    return read_pair(*files[split])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def evaluate(translator: Translator, sources: list[str], refs: list[str], split: str = "test",
             command: str = "") -> tuple[dict[str, Any], list[str]]:
    """Translate `sources`, score against `refs` (both normalized as in training); the report and hypotheses."""
    engine = translator.engine
    _sync(engine.device)
    start = time.perf_counter()
    nbest = translator.search(sources)
    _sync(engine.device)
    seconds = time.perf_counter() - start
    hyps = [translator.detokenize(n[0]) if n else "" for n in nbest]
    out_tokens = sum(len(n[0].tokens) + 1 for n in nbest if n)
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
        "parameters": count_parameters(engine.model) if isinstance(engine, TorchEngine) else None,
        # How long the evaluated model had trained when its checkpoint was written (the latest of an average).
        "checkpoint_progress": {"steps": first.steps, "minutes": first.minutes},
        "tokenizer_id": translator.tokenizer.identity,
    }
    return report, hyps


def write_report(report: dict[str, Any], hyps: list[str], json_path: Path, hyp_path: Path) -> None:
    """Write the hypotheses and the JSON report as a pair: both go to temporary files first; when both are on
    disk in full, the hypotheses are renamed into place, then the report. A failure while writing either
    leaves both files as they were."""
    with atomic_output(json_path) as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())  # a full disk shows here, before the hypotheses replace anything
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
