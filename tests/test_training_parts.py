"""Schedules, optimizer groups and atomic files: small invariants."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch
import yaml

from nmt.config import TrainConfig
from nmt.fileio import atomic_output
from nmt.optim import Plateau, build_optimizer, constant, inverse_sqrt, learning_rate, noam
from tests.conftest import tiny_config


def test_schedules_at_key_steps():
    assert noam(1, 256, 4000) == pytest.approx(256 ** -0.5 * 4000 ** -1.5)
    assert noam(4000, 256, 4000) == pytest.approx(256 ** -0.5 * 4000 ** -0.5)
    assert noam(16000, 256, 4000, 2.0) == pytest.approx(2 * 256 ** -0.5 * 16000 ** -0.5)
    assert noam(3999, 256, 4000) < noam(4000, 256, 4000) > noam(4001, 256, 4000)
    assert inverse_sqrt(1, 1e-3, 100) == pytest.approx(1e-5)
    assert inverse_sqrt(100, 1e-3, 100) == pytest.approx(1e-3)
    assert inverse_sqrt(400, 1e-3, 100) == pytest.approx(5e-4)
    assert constant(1, 1e-3, 10) == pytest.approx(1e-4)
    assert constant(10, 1e-3, 10) == constant(1000, 1e-3, 10) == pytest.approx(1e-3)
    assert constant(1, 1e-3, 0) == pytest.approx(1e-3)


def test_plateau_decays_after_patience():
    cfg = TrainConfig(schedule="plateau", lr=1e-3, warmup=0, plateau_patience=1, plateau_factor=0.5, max_steps=1)
    plateau = Plateau(0.5, 1, 1e-5, higher_is_better=True)
    for value in (10.0, 9.0, 8.0):
        plateau.observe(value, cfg.lr)
    assert learning_rate(100, cfg, 256, plateau) == pytest.approx(5e-4)


def test_no_decay_on_bias_norm_embedding():
    model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(5, 4), "proj": torch.nn.Linear(4, 4),
                                 "norm": torch.nn.LayerNorm(4)})
    opt = build_optimizer(model, TrainConfig(weight_decay=0.1, optimizer="adamw", max_steps=1,
                                             lr_multipliers={"proj": 0.5}))
    by_id = {id(p): g for g in opt.param_groups for p in g["params"]}
    assert by_id[id(model["proj"].weight)]["weight_decay"] == 0.1
    assert by_id[id(model["proj"].weight)]["lr_scale"] == 0.5
    for p in (model["proj"].bias, model["norm"].weight, model["embed"].weight):
        assert by_id[id(p)]["weight_decay"] == 0.0


def test_atomic_output_gives_the_permissions_of_a_plain_open(tmp_path):
    old = os.umask(0o027)
    try:
        with atomic_output(tmp_path / "report.json") as handle:
            handle.write("{}")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o640


def test_validation_pairs_beyond_the_positions_are_left_out_or_refused(caplog):
    from nmt.data import Split
    from nmt.errors import ConfigError
    from nmt.run.lifecycle import _check_validation_lengths
    from nmt.trainer import pairs_within

    ids = [np.arange(n) for n in (3, 9, 4)]
    split = Split("val", ids, [np.arange(n) for n in (2, 2, 8)])
    assert pairs_within(split, None).tolist() == [0, 1, 2]
    assert pairs_within(split, 5).tolist() == [0]  # 4 ids + EOS fit in 5 positions; 8 + BOS do not
    with caplog.at_level("WARNING"):
        _check_validation_lengths(split, 5, rank=0)
    assert "leaves out 2 of 3 pairs" in caplog.text
    with pytest.raises(ConfigError, match="every validation pair is longer"):
        _check_validation_lengths(split, 3, rank=0)


def test_stored_configs_load_as_they_were_written(tmp_path):
    """Rules for starting a run do not make an earlier checkpoint's config unreadable."""
    from nmt.config import config_from_dict, load_config, to_dict
    from nmt.errors import ConfigError

    raw = to_dict(load_config(str(tiny_config(tmp_path))))
    raw["train"]["average_last"], raw["train"]["keep_best"] = 3, 2
    raw["data"]["test_src"] = "leftover.de"
    assert config_from_dict(raw).train.average_last == 3
    path = tmp_path / "stored.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match="average_last"):
        load_config(path)
