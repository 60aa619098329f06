"""Translate sentences with a trained model, score them with sacrebleu, and write evaluation reports."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu
import torch

from nmt.checkpoint import Loaded
from nmt.config import DecodeConfig, to_dict
from nmt.data import sha256_file
from nmt.decode import detokenize, translate_ids
from nmt.models import count_parameters
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


def evaluate(loaded: Loaded, sources: list[str], refs: list[str], cfg: DecodeConfig, device: torch.device,
             precision: str = "fp32", split: str = "test", max_tokens: int = 250) -> tuple[dict[str, Any], list[str]]:
    """Translate `sources`, score against `refs`; returns the report and the hypotheses."""
    ids = [np.asarray(s[:max_tokens], dtype=np.int64) for s in loaded.tokenizer.encode_src(sources)]
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    nbest = translate_ids(loaded.model, ids, cfg, device, precision)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    hyps = detokenize(loaded.tokenizer, nbest)
    out_tokens = sum(len(n[0].tokens) + 1 for n in nbest if n)
    report = {
        "split": split,
        "sentences": len(sources),
        "scores": score(hyps, refs),
        "note": "bleu_lc is sacrebleu -lc (13a tokenizer), the closest match to the lowercased tokenized BLEU "
                "many papers and tutorials quote",
        "decode": asdict(cfg),
        "precision": precision,
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(sources) / seconds, 2),
        "tgt_tokens_per_s": round(out_tokens / seconds, 1),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} "
                                                                                   "threads)",
        "checkpoint": str(loaded.path),
        "checkpoint_sha256": sha256_file(loaded.path),
        "config_sha256": hashlib.sha256(json.dumps(to_dict(loaded.cfg), sort_keys=True).encode()).hexdigest(),
        "experiment": loaded.cfg.name,
        "parameters": count_parameters(loaded.model),
        # How long the evaluated model had trained when its checkpoint was written (the latest of an average).
        "checkpoint_progress": {"steps": loaded.progress.get("step"),
                                "minutes": round(loaded.progress.get("elapsed", 0.0) / 60, 2)},
        "tokenizer_id": loaded.tokenizer.identity,
    }
    return report, hyps


def write_report(report: dict[str, Any], hyps: list[str], json_path: Path, hyp_path: Path) -> None:
    """Write the JSON report and the hypotheses, each atomically."""
    with atomic_output(json_path) as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")
    with atomic_output(hyp_path) as handle:
        handle.writelines(h + "\n" for h in hyps)


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
        f"(beam {report['decode']['beam']})",
    ])
