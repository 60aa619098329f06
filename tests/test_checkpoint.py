"""The checkpoint bundle: versions, keys, inference and resume loaders."""

from __future__ import annotations

import pytest
import torch

import nmt.checkpoint as ck
from nmt.api import load_config
from nmt.data import prepare
from nmt.trainer import Trainer
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def trainer(tmp_path_factory) -> Trainer:
    folder = tmp_path_factory.mktemp("bundle")
    cfg = load_config(str(tiny_config(folder)), [])
    return Trainer(cfg, prepare(cfg, log=lambda _m: None), torch.device("cpu"))


def test_a_version_1_payload_still_loads_for_inference(trainer, tmp_path):
    payload = trainer.bundle(training=False).payload()
    del payload["version"]
    ck.save_checkpoint(payload, tmp_path / "v1.pt")
    assert ck.load_bundle(tmp_path / "v1.pt").version == 1
    loaded = ck.load_model(tmp_path / "v1.pt", torch.device("cpu"))
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value), key


def test_new_versions_and_missing_keys_are_named(trainer, tmp_path):
    payload = trainer.bundle().payload()
    ck.save_checkpoint(payload | {"version": ck.VERSION + 1}, tmp_path / "new.pt")
    with pytest.raises(ck.CheckpointError, match=f"version {ck.VERSION + 1}"):
        ck.load_bundle(tmp_path / "new.pt")
    for key in ck.INFERENCE_KEYS:
        ck.save_checkpoint({k: v for k, v in payload.items() if k != key}, tmp_path / "cut.pt")
        with pytest.raises(ck.CheckpointError, match=f"missing {key}"):
            ck.load_bundle(tmp_path / "cut.pt")


def test_resume_loader_wants_training_state_and_matching_settings(trainer, tmp_path):
    ck.save_checkpoint(trainer.bundle(training=False).payload(), tmp_path / "model.pt")
    with pytest.raises(ck.CheckpointError, match="no training state .*optimizer"):
        ck.load_for_resume(tmp_path / "model.pt", trainer.cfg, trainer.data.tokenizer.identity)
    ck.save_checkpoint(trainer.bundle().payload(), tmp_path / "full.pt")
    bundle = ck.load_for_resume(tmp_path / "full.pt", trainer.cfg, trainer.data.tokenizer.identity)
    assert isinstance(bundle, ck.Bundle) and bundle.training is not None
    assert set(ck.load_checkpoint(tmp_path / "full.pt")) >= set(ck.INFERENCE_KEYS) | {"version", "optimizer", "rng"}
    with pytest.raises(ck.CheckpointError, match="different vocabulary"):
        ck.load_for_resume(tmp_path / "full.pt", trainer.cfg, "another tokenizer")
