"""The checkpoint bundle: versions, keys, inference and resume loaders."""

from __future__ import annotations

import pytest
import torch

from nmt.checkpoint import (INFERENCE_KEYS, VERSION, Bundle, CheckpointError, load_bundle, load_checkpoint,
                            load_for_resume, load_model, save_checkpoint)
from nmt.cli import load
from nmt.data import prepare
from nmt.train import Trainer
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def trainer(tmp_path_factory) -> Trainer:
    folder = tmp_path_factory.mktemp("bundle")
    cfg = load(str(tiny_config(folder)), [])
    return Trainer(cfg, prepare(cfg, log=lambda _m: None), torch.device("cpu"))


def test_a_version_1_payload_still_loads_for_inference(trainer, tmp_path):
    payload = trainer.bundle(training=False).payload()
    del payload["version"]
    save_checkpoint(payload, tmp_path / "v1.pt")
    assert load_bundle(tmp_path / "v1.pt").version == 1
    loaded = load_model(tmp_path / "v1.pt", torch.device("cpu"))
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value), key


def test_new_versions_and_missing_keys_are_named(trainer, tmp_path):
    payload = trainer.bundle().payload()
    save_checkpoint(payload | {"version": VERSION + 1}, tmp_path / "new.pt")
    with pytest.raises(CheckpointError, match=f"version {VERSION + 1}"):
        load_bundle(tmp_path / "new.pt")
    for key in INFERENCE_KEYS:
        save_checkpoint({k: v for k, v in payload.items() if k != key}, tmp_path / "cut.pt")
        with pytest.raises(CheckpointError, match=f"missing {key}"):
            load_bundle(tmp_path / "cut.pt")


def test_resume_loader_wants_training_state_and_matching_settings(trainer, tmp_path):
    save_checkpoint(trainer.bundle(training=False).payload(), tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="no training state .*optimizer"):
        load_for_resume(tmp_path / "model.pt", trainer.cfg, trainer.data.tokenizer.identity)
    save_checkpoint(trainer.bundle().payload(), tmp_path / "full.pt")
    bundle = load_for_resume(tmp_path / "full.pt", trainer.cfg, trainer.data.tokenizer.identity)
    assert isinstance(bundle, Bundle) and bundle.training is not None
    assert set(load_checkpoint(tmp_path / "full.pt")) >= set(INFERENCE_KEYS) | {"version", "optimizer", "rng"}
    with pytest.raises(CheckpointError, match="different vocabulary"):
        load_for_resume(tmp_path / "full.pt", trainer.cfg, "another tokenizer")
