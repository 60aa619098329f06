"""Shared helpers: tiny configs on the embedded sample, written into a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from nmt.fileio import atomic_output

REPO = Path(__file__).resolve().parents[1]


def tiny_config(folder: Path, name: str = "tiny", arch: str = "transformer", **sections: dict) -> Path:
    """Write a tiny, fast config for the sample corpus into `folder` and return its path."""
    model = ({"arch": "transformer", "d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
              "decoder_layers": 1} if arch == "transformer" else
             {"arch": "rnn", "emb_dim": 32, "hidden_size": 32, "encoder_layers": 1, "decoder_layers": 1})
    raw = {
        "name": name,
        "run_root": str(folder / "runs"),
        "data": {"dataset": "sample", "cache_dir": str(folder / "cache")},
        "tokenizer": {"vocab_size": 300},
        "model": {**model, "dropout": 0.1},
        # The CPU unless NMT_TEST_DEVICE says otherwise (benchmarks/gpu_check.py runs the suite with cuda).
        "train": {"batch_tokens": 512, "max_steps": 30, "max_epochs": 0, "lr": 3e-3, "warmup": 10, "log_every": 5,
                  "eval_every": 10, "eval_bleu": False, "keep_best": 2,
                  "device": os.environ.get("NMT_TEST_DEVICE", "cpu")},
        "decode": {"beam": 2, "batch_tokens": 2000},
    }
    for section, values in sections.items():
        raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) else values
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    with atomic_output(path) as handle:  # torchrun ranks write the same config at once: none may read it half-written
        handle.write(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A tiny Transformer trained briefly on the sample (shared by the CLI tests)."""
    from nmt.cli import train_main

    folder = tmp_path_factory.mktemp("trained")
    cfg = tiny_config(folder, name="shared", train={"max_steps": 60, "eval_every": 30})
    assert train_main([str(cfg)]) == 0
    return folder / "runs" / "shared"
