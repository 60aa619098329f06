"""Checkpoints: the file format (integrity, no code), the versioned bundle, the inference and resume loaders,
and the one-line refusals of checkpoints that are damaged, hand-made or of another model or vocabulary."""

from __future__ import annotations

import math

import pytest
import torch

import nmt.checkpoint as ck
from nmt.cli import average_main, train_main, translate_main
from nmt.config import load_config
from nmt.data import prepare
from nmt.trainer import Trainer
from tests.conftest import fails_cleanly, tiny_config


@pytest.fixture(scope="module")
def trainer(tmp_path_factory) -> Trainer:
    folder = tmp_path_factory.mktemp("bundle")
    cfg = load_config(str(tiny_config(folder)))
    return Trainer(cfg, prepare(cfg, log=lambda _m: None), torch.device("cpu"))


def test_a_checkpoint_is_a_plain_torch_file_that_weights_only_loading_reads(trainer, tmp_path):
    """torch.load(path, weights_only=True) with no allow-list, as docs/training.md and nmt/checkpoint.py say."""
    ck.save_contents(trainer.contents(), tmp_path / "last.pt")
    plain = torch.load(tmp_path / "last.pt", weights_only=True, map_location="cpu")
    ours = ck.load_checkpoint(tmp_path / "last.pt")
    assert set(plain) == set(ours) >= set(ck.INFERENCE_KEYS) | {"version", "optimizer", "rng"}
    assert plain["version"] == ck.VERSION and plain["config"] == ours["config"] and "model_config" not in plain
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(plain["model"][key], value), key


@pytest.mark.parametrize("version", [None, 2, 4, "3"])
def test_another_format_version_is_refused_naming_it(trainer, tmp_path, version):
    payload = trainer.contents(training=False).payload()
    payload.pop("version") if version is None else payload.update(version=version)
    ck.save_checkpoint(payload, tmp_path / "other.pt")
    with pytest.raises(ck.CheckpointError, match=f"format version {version!r}, but this nmt reads version 3"):
        ck.load_contents(tmp_path / "other.pt")


def test_a_plain_torch_save_is_not_taken_for_a_checkpoint(trainer, tmp_path):
    torch.save(trainer.contents().payload(), tmp_path / "foreign.pt")
    with pytest.raises(ck.CheckpointError, match="not written by nmt"):
        ck.load_checkpoint(tmp_path / "foreign.pt")


def test_new_versions_and_missing_keys_are_named(trainer, tmp_path):
    payload = trainer.contents().payload()
    ck.save_checkpoint(payload | {"version": ck.VERSION + 1}, tmp_path / "new.pt")
    with pytest.raises(ck.CheckpointError, match=f"version {ck.VERSION + 1}"):
        ck.load_contents(tmp_path / "new.pt")
    for key in ck.INFERENCE_KEYS:
        ck.save_checkpoint({k: v for k, v in payload.items() if k != key}, tmp_path / "cut.pt")
        with pytest.raises(ck.CheckpointError, match=f"missing {key}"):
            ck.load_contents(tmp_path / "cut.pt")


def test_resume_loader_wants_training_state_and_matching_settings(trainer, tmp_path):
    ck.save_checkpoint(trainer.contents(training=False).payload(), tmp_path / "model.pt")
    with pytest.raises(ck.CheckpointError, match="no training state .*optimizer"):
        ck.load_for_resume(tmp_path / "model.pt", trainer.cfg, trainer.data.tokenizer.identity)
    ck.save_checkpoint(trainer.contents().payload(), tmp_path / "full.pt")
    bundle = ck.load_for_resume(tmp_path / "full.pt", trainer.cfg, trainer.data.tokenizer.identity)
    assert isinstance(bundle, ck.CheckpointContents) and bundle.training is not None
    assert set(ck.load_checkpoint(tmp_path / "full.pt")) >= set(ck.INFERENCE_KEYS) | {"version", "optimizer", "rng"}
    with pytest.raises(ck.CheckpointError, match="different vocabulary"):
        ck.load_for_resume(tmp_path / "full.pt", trainer.cfg, "another tokenizer")


def test_checkpoint_round_trip_and_corruption(tmp_path):
    path = tmp_path / "c.pt"
    ck.save_checkpoint({"w": torch.arange(1000.0), "step": 3, "blob": b"abc"}, path)
    state = ck.load_checkpoint(path)
    assert state["step"] == 3 and torch.equal(state["w"], torch.arange(1000.0))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "flip.pt").write_bytes(bytes(data))
    (tmp_path / "cut.pt").write_bytes(path.read_bytes()[: len(data) // 2])
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    for name, message in [("flip.pt", "corrupt"), ("cut.pt", "corrupt"), ("junk.pt", "not an nmt checkpoint"),
                          ("missing.pt", "not found")]:
        with pytest.raises(ck.CheckpointError, match=message):
            ck.load_checkpoint(tmp_path / name)
    assert not list(tmp_path.glob(".*.tmp"))


def test_checkpoint_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (math.sqrt, (4.0,))

    ck.save_checkpoint({"x": Evil()}, tmp_path / "evil.pt")  # a well-formed file whose payload would run a function
    with pytest.raises(ck.CheckpointError, match="cannot be read as data"):
        ck.load_checkpoint(tmp_path / "evil.pt")


@pytest.mark.parametrize("key,value,message", [("model", [1, 2], "its model is a list"),
                                               ("progress", "far", "its progress is a str"),
                                               ("model", {"w": 3}, "not all named tensors")])
def test_hand_made_checkpoints_are_refused_by_type(trained_run, tmp_path, capsys, key, value, message):
    payload = ck.load_checkpoint(trained_run / "checkpoints" / "best.pt")
    payload[key] = value
    path = tmp_path / "odd.pt"
    ck.save_checkpoint(payload, path)
    fails_cleanly(translate_main, ["-c", str(path)], capsys, tmp_path, message)


def test_weights_that_do_not_fit_the_config_are_one_line(trained_run, tmp_path, capsys):
    payload = ck.load_checkpoint(trained_run / "checkpoints" / "best.pt")
    payload["model"] = {k: v for i, (k, v) in enumerate(payload["model"].items()) if i % 2}
    path = tmp_path / "half.pt"
    ck.save_checkpoint(payload, path)
    fails_cleanly(translate_main, ["-c", str(path)], capsys, tmp_path,
                  "does not match its config: its weights have no tensor")


def test_corrupt_and_incompatible_checkpoints_are_refused(trained_copy, capsys):
    cfg, run = trained_copy
    last = run / "checkpoints" / "last.pt"
    good = last.read_bytes()
    assert train_main([str(cfg), "--no-evaluate", "--set", "model.d_model=64", "--set", "train.max_steps=70"]) == 1
    assert "model.d_model" in capsys.readouterr().err
    last.write_bytes(good[: len(good) // 2])
    assert train_main([str(cfg), "--no-evaluate", "--set", "train.max_steps=70"]) == 1
    assert "truncated or corrupt" in capsys.readouterr().err
    assert train_main([str(cfg), "--no-evaluate", "--set", "tokenizer.vocab_size=250",
                       "--set", "train.max_steps=70"]) == 1
    assert "vocabulary" in capsys.readouterr().err


def test_resuming_with_another_number_of_processes_says_how_to(trained_copy):
    cfg, run = trained_copy
    last = run / "checkpoints" / "last.pt"
    bundle = ck.load_contents(last)
    bundle.training.sampler["num_replicas"] = 2
    ck.save_contents(bundle, last)
    with pytest.raises(ck.CheckpointError, match="saved by a run of 2 process.* --nproc_per_node 2, or give --restart"):
        ck.load_for_resume(last, load_config(cfg), bundle.tokenizer_id, 1)


def test_averaging_refuses_checkpoints_of_another_tokenizer(trained_run, other_vocabulary_run, tmp_path, capsys):
    fails_cleanly(average_main, [str(trained_run / "checkpoints" / "best.pt"),
                                 str(other_vocabulary_run / "checkpoints" / "best.pt"), "-o",
                                 str(tmp_path / "avg.pt")], capsys, tmp_path, "its tokenizer differs")
