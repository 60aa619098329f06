"""Does the Hugging Face export translate as nmt does? Greedy test BLEU of a run decoded by nmt and by
`transformers` from its `nmt-export --format huggingface` folder.

Usage: python -m benchmarks.hf_agreement RUN [--split test] [--batch-size 32] [--device auto] [--threads N]

Exports the run's final checkpoint into a temporary folder, loads it with AutoTokenizer and
AutoModelForSeq2SeqLM (offline), and translates the split greedily, nmt with beam 1 and the run's other decoding
settings, transformers twice: as a user of the folder would (batches of --batch-size lines, the export's
generation_config.json, whose length cap max_length holds for the whole batch), and under nmt's length rule (the
lines of one cap, floor(max_len_a * source length + max_len_b), in batches of their own with max_new_tokens that
cap and its EOS). Each is scored with sacreBLEU against the references as nmt normalizes them. Writes
benchmarks/results/hf_agreement_<run name>_<device>.json with the BLEU scores, their differences from nmt's, the
shares of lines identical to nmt's, the model's sha256 and training updates, and the commit of the code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from benchmarks.common import add_split, begin, device_tag, finish, measurement_parser, run_name
from nmt.cli import command, number
from nmt.config import AT_LEAST_ONE, decode_with
from nmt.evaluation import split_pair
from nmt.fileio import sha256_file
from nmt.loader import load_translator
from nmt.search import max_lengths

MODULE = "benchmarks.hf_agreement"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__, threads="CPU threads of both (default: torch's choice)")
    parser.add_argument("run", help="run folder or checkpoint file")
    add_split(parser)
    parser.add_argument("--batch-size", type=number(AT_LEAST_ONE, integer=True), default=32,
                        help="source lines per transformers generate() call (default 32)")
    return parser.parse_args(argv)


def hf_translate(folder: Path, lines: list[str], batch_size: int, device: torch.device,
                 caps: list[int] | None = None) -> list[str]:
    """Greedy translations by transformers alone: with `caps` None under the folder's generation_config, else
    each line at most its cap of tokens before EOS (the lines of one cap batched together)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSeq2SeqLM.from_pretrained(str(folder)).to(device).eval()
    groups = [(None, list(range(len(lines))))] if caps is None else [
        (cap, [i for i, c in enumerate(caps) if c == cap]) for cap in sorted(set(caps))]
    out = [""] * len(lines)
    with torch.inference_mode():
        for cap, rows in groups:
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                batch = tokenizer([lines[i] for i in chunk], return_tensors="pt", padding=True).to(device)
                limit = {} if cap is None else {"max_new_tokens": cap + 1, "max_length": None}
                ids = model.generate(**batch, num_beams=1, do_sample=False, **limit)
                for i, text in zip(chunk, tokenizer.batch_decode(ids, skip_special_tokens=True), strict=True):
                    out[i] = text
    return out


def measure(args: argparse.Namespace, device: torch.device, folder: Path) -> dict[str, Any]:
    from nmt.interop.hf_export import export_huggingface

    nmt_greedy = load_translator([args.run], device, "fp32")
    nmt_greedy = nmt_greedy.with_decode(decode_with(nmt_greedy.decode, {"beam": 1, "n_best": 1}))
    manifest = export_huggingface(args.run, folder)
    sources, refs = split_pair(nmt_greedy.cfg, args.split)
    refs = [nmt_greedy.normalize(r) for r in refs]
    d = nmt_greedy.decode
    lengths = torch.tensor([len(ids) + 1 for ids in nmt_greedy.encode(sources)])  # with EOS, as read
    caps = max_lengths(torch.arange(int(lengths.max()))[None] < lengths[:, None], d.max_len_a, d.max_len_b,
                       nmt_greedy.engine.max_positions).tolist()
    hyps = {"nmt": nmt_greedy.translate(sources, split_sentences="off"),  # line by line, as transformers reads them
            "transformers": hf_translate(folder, sources, args.batch_size, device),
            "transformers_nmt_caps": hf_translate(folder, sources, args.batch_size, device, caps)}
    metric = sacrebleu.BLEU()
    bleu = {name: round(metric.corpus_score(h, [refs]).score, 2) for name, h in hyps.items()}
    signature = str(metric.get_signature())
    same = {name: round(sum(a == b for a, b in zip(hyps["nmt"], h, strict=True)) / len(sources), 4)
            for name, h in hyps.items() if name != "nmt"}
    member = nmt_greedy.members[0]
    return {"benchmark": "hf_agreement", "run": run_name(member.path, nmt_greedy.cfg.name), "split": args.split,
            "sentences": len(sources), "checkpoint": member.path,
            "checkpoint_sha256": member.sha256, "updates": member.steps, "train_minutes": member.minutes,
            "export_class": manifest["class"], "transformers_version": manifest["transformers_version"],
            "model_safetensors_sha256": sha256_file(folder / "model.safetensors"), "batch_size": args.batch_size,
            "threads": torch.get_num_threads(), "bleu_signature": signature, "bleu": bleu,
            "difference_from_nmt": {name: round(bleu["nmt"] - value, 2) for name, value in bleu.items()
                                    if name != "nmt"},
            "identical_share": same,
            "decode": {"nmt": {"beam": 1, "max_len_a": d.max_len_a, "max_len_b": d.max_len_b,
                               "max_source_tokens": d.max_source_tokens},
                       "transformers": "greedy under the export's generation_config.json (max_length "
                                       f"{generation_settings(folder)['max_length']} for the whole batch)",
                       "transformers_nmt_caps": "greedy, max_new_tokens = nmt's cap of the line + 1, lines of one "
                                                "cap batched together"}}


def generation_settings(folder: Path) -> dict[str, Any]:
    """The export's generation_config.json."""
    return json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="bench_hf_agreement.") as scratch:
        result = measure(args, device, Path(scratch) / "export")
    out = args.out_dir / f"hf_agreement_{result['run']}_{device_tag(device)}.json"
    bleu, same = result["bleu"], result["identical_share"]
    return finish(out, device, MODULE, argv, result, f"{result['split']} greedy BLEU: nmt {bleu['nmt']:.2f}; "
                  f"transformers {bleu['transformers']:.2f} (identical lines {100 * same['transformers']:.1f}%), "
                  f"under nmt's length caps {bleu['transformers_nmt_caps']:.2f} "
                  f"(identical {100 * same['transformers_nmt_caps']:.1f}%)")


if __name__ == "__main__":
    sys.exit(main())
