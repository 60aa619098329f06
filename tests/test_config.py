"""Config loading: types, unknown keys, cross-field checks, overrides, the generated reference."""

from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import subprocess
import sys
import typing

import pytest
import sentencepiece as spm
import yaml

import nmt
from nmt.config import (
    VARIANTS,
    Config,
    DecodeConfig,
    Range,
    TokenizerConfig,
    TrainConfig,
    check_ranges,
    load_config,
    parse_overrides,
    reference_markdown,
    save_config,
    to_dict,
)
from nmt.errors import ConfigError
from tests.conftest import REPO


def write(tmp_path, data, name="c.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def test_defaults_and_types(tmp_path):
    cfg = load_config(write(tmp_path, {"name": "x", "train": {"lr": "3e-4", "max_steps": 5}}))
    assert isinstance(cfg, Config)
    assert cfg.train.lr == pytest.approx(3e-4)
    assert cfg.model.d_model == 256


def test_unknown_key_suggests_nearest(tmp_path):
    path = write(tmp_path, {"train": {"learning_rate": 1, "max_steps": 5, "lrr": 2}})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "train.learning_rate" in str(err.value) and str(path) in str(err.value)
    with pytest.raises(ConfigError, match="did you mean 'model'"):
        load_config(write(tmp_path, {"modle": {}, "train": {"max_steps": 5}}))


def test_wrong_type_names_key_and_file(tmp_path):
    path = write(tmp_path, {"model": {"heads": "four"}, "train": {"max_steps": 5}})
    with pytest.raises(ConfigError, match=r"c\.yaml: model\.heads: expected int"):
        load_config(path)
    with pytest.raises(ConfigError, match="model.pre_norm: expected bool"):
        load_config(write(tmp_path, {"model": {"pre_norm": 1}, "train": {"max_steps": 5}}))


def test_bad_choice(tmp_path):
    with pytest.raises(ConfigError, match="train.precision: 'fp8' is not one of fp32, bf16, fp16"):
        load_config(write(tmp_path, {"train": {"precision": "fp8", "max_steps": 5}}))


@pytest.mark.parametrize("section,message", [
    ({"model": {"d_model": 100, "heads": 3}}, "divisible"),
    ({"model": {"tie_embeddings": True}, "tokenizer": {"joint": False}}, "tokenizer.joint"),
    ({"decode": {"beam": 2, "n_best": 3}}, "n_best"),
    ({"name": "../escape"}, "name"),
    ({"name": "abc\n"}, "name"),
    ({"train": {"max_steps": 5, "keep_best": 2, "average_last": 3}}, r"train\.average_last \(3\).*train\.keep_best"),
    ({"model": {"dropout": 1.5}}, "model.dropout"),
    ({"data": {"dataset": "files"}}, "data.train_src"),
    ({"model": {"max_positions": 64}, "data": {"max_tokens": 100}}, "model.max_positions"),
])
def test_cross_field_and_value_checks(tmp_path, section, message):
    data = {"train": {"max_steps": 5}, **section}
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, data))


def test_no_stop_condition(tmp_path):
    with pytest.raises(ConfigError, match="max_steps"):
        load_config(write(tmp_path, {"train": {"max_epochs": 0}}))
    with pytest.raises(ConfigError, match="max_steps"):
        Config(train=TrainConfig(max_epochs=0))


def test_a_config_built_in_code_is_valid_and_has_a_stopping_rule(tmp_path):
    assert Config().train.max_epochs == 10 and load_config(write(tmp_path, {})).train.max_epochs == 10
    with pytest.raises(ConfigError, match="tie_embeddings"):
        Config(tokenizer=TokenizerConfig(joint=False))  # a Config checks itself whole when it is built


def test_unknown_attention_lists_valid_names(tmp_path):
    path = write(tmp_path, {"model": {"arch": "transformer", "self_attention": "fancy"}, "train": {"max_steps": 5}})
    with pytest.raises(ConfigError, match="full") as err:
        nmt.load_config(str(path))
    assert "fancy" in str(err.value) and str(path) in str(err.value)


def test_overrides_are_typed(tmp_path):
    path = write(tmp_path, {"train": {"max_steps": 5}})
    cfg = load_config(path, {"train.lr": 3e-4, "model.heads": 8, "train.betas": [0.9, 0.99], "name": "run2"})
    assert cfg.train.lr == pytest.approx(3e-4) and cfg.model.heads == 8
    assert cfg.train.betas == [0.9, 0.99] and cfg.name == "run2"
    with pytest.raises(ConfigError, match="model.heads: expected int"):
        load_config(path, {"model.heads": "many"})
    for wrong in ("train.max_steps=5", ["train.max_steps", 5], {5: 1}):
        with pytest.raises(ConfigError, match="overrides: .*'train.max_steps'"):
            load_config(path, wrong)


def test_command_line_overrides_are_read_as_yaml_into_the_mapping(tmp_path):
    path = write(tmp_path, {"train": {"max_steps": 5}})
    overrides = parse_overrides(["train.lr=3e-4", "model.heads=8", "train.betas=[0.9, 0.99]", "name=run2"])
    assert overrides == {"train.lr": "3e-4", "model.heads": 8, "train.betas": [0.9, 0.99], "name": "run2"}
    assert load_config(path, overrides) == load_config(
        path, {"train.lr": 3e-4, "model.heads": 8, "train.betas": [0.9, 0.99], "name": "run2"})
    assert list(parse_overrides(["model={heads: 2}", "model.d_model=64", "model={heads: 8}"])) == [
        "model.d_model", "model"], "a key given again applies where it was last given, as --set does"
    with pytest.raises(ConfigError, match="model.heads: expected int"):
        load_config(path, parse_overrides(["model.heads=many"]))
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["model.heads"])


def test_load_config_checks_attention_variants_without_torch(tmp_path):
    path = write(tmp_path, {"model": {"self_attention": "local", "self_attention_settings": {"windw": 4}}})
    code = ("import sys, nmt\n"
            "assert nmt.load_config is nmt.config.load_config\n"
            f"for config, overrides in (({str(path)!r}, None), ({{}}, {{'model.self_attention': 'fancy'}})):\n"
            "    try:\n"
            "        nmt.load_config(config, overrides)\n"
            "    except nmt.ConfigError as err:\n"
            "        print(err)\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{path}: unknown key model.self_attention_settings.windw (did you mean 'window'?)",
        "model.self_attention: 'fancy' is not one of full, local, sparse, linear", "False"]


def test_invalid_yaml_names_line(tmp_path):
    with pytest.raises(ConfigError, match=r"c\.yaml line \d+: invalid YAML"):
        load_config(write(tmp_path, "train:\n  max_steps: [1\n"))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a folder, not a regular file"):
        load_config(tmp_path)


def test_round_trip(tmp_path):
    cfg = load_config(write(tmp_path, {"name": "rt", "train": {"max_steps": 7}}))
    save_config(cfg, tmp_path / "out" / "config.yaml")
    again = load_config(tmp_path / "out" / "config.yaml")
    assert to_dict(again) == to_dict(cfg)


def test_reference_documents_every_key():
    text = reference_markdown()
    for key, value in to_dict(Config()).items():
        for name in value if isinstance(value, dict) else [key]:
            assert f"| `{name}` |" in text, name


def test_repository_configs_load_and_name_their_run_folders():
    """Every config under configs/ (the comparison suites' included) loads, and its name, which names its run
    folder, is its file's: `make train CONFIG=configs/x.yaml` trains runs/x."""
    from pathlib import Path

    configs = Path(__file__).resolve().parents[1] / "configs"
    paths = sorted(configs.glob("**/*.yaml"))
    assert configs / "sample_transformer.yaml" in paths  # the Makefile's default: the glob looked in the right place
    for path in paths:
        assert nmt.load_config(path).name == path.stem, path


def test_generated_reference_is_up_to_date(capsys):
    from pathlib import Path

    from nmt.cli import config_doc_main

    assert config_doc_main([]) == 0
    generated = capsys.readouterr().out
    committed = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text(encoding="utf-8")
    assert committed.strip() == generated.strip(), "run `make docs` to regenerate docs/config.md"
    assert reference_markdown().strip() in generated and "| `model.self_attention_settings` | `local` | `window` |" \
        in generated


def test_every_number_setting_has_a_range_its_default_satisfies():
    for name in ("data", "tokenizer", "model", "train", "decode"):
        section = getattr(Config(), name)
        hints = typing.get_type_hints(type(section))
        for f in dataclasses.fields(section):
            if "float" in str(hints[f.name]) or hints[f.name] is int:
                assert f.metadata.get("bounds") is not None, f"{name}.{f.name} has no range"
        check_ranges(section, name)


def _number_keys() -> list[str]:
    """section.key of every scalar number setting."""
    keys = []
    for name in ("data", "tokenizer", "model", "train", "decode"):
        hints = typing.get_type_hints(type(getattr(Config(), name)))
        keys += [f"{name}.{f.name}" for f in dataclasses.fields(getattr(Config(), name))
                 if f.metadata.get("bounds") is not None and typing.get_origin(hints[f.name]) not in (list, dict)]
    return keys


def test_every_number_setting_has_a_finite_upper_bound():
    """A number without one overflows somewhere: a length penalty of 1000 did in the search."""
    for name in ("data", "tokenizer", "model", "train", "decode"):
        for f in dataclasses.fields(getattr(Config(), name)):
            if f.metadata.get("bounds") is not None:
                assert math.isfinite(f.metadata["bounds"].high), f"{name}.{f.name} has no upper bound"
    variant_settings = [s for variants in VARIANTS.values() for v in variants.values() for s in v.settings]
    assert {s.name for s in variant_settings} >= {"window", "stride"}
    for s in variant_settings:
        if s.type in (int, float):
            assert s.bounds is not None and math.isfinite(s.bounds.high), f"variant setting {s.name}"


@pytest.mark.parametrize("value", ["1.0e300", ".inf", "-.inf", ".nan", str(10**30)])
def test_huge_and_non_finite_numbers_are_refused_for_every_setting(tmp_path, value):
    path = write(tmp_path, {"train": {"max_steps": 5}})
    for key in _number_keys():
        with pytest.raises(ConfigError, match=rf"^{re.escape(f'{path}: {key}: ')}") as err:
            load_config(path, parse_overrides([f"{key}={value}"]))
        assert len(str(err.value)) < 200 + len(str(path))
    with pytest.raises(ConfigError, match="model.self_attention_settings.window: got 1000000"):
        nmt.load_config(path, {"model.self_attention": "local", "model.self_attention_settings": {"window": 10**30}})


@pytest.mark.parametrize("data,words", [
    ({"name": "a" * 100_000}, "name: 'aaaa"),
    ({"name": "a" * 201}, "1 to 200 letters"),
    ({"run_root": "r" * 100_000}, "run_root: 'rrrr"),
    ({"data": {"dataset": "files", "train_src": "/tmp/" + "a" * 100_000, "train_tgt": "t", "val_src": "v",
               "val_tgt": "v"}}, "data.train_src: '/tmp/aaa"),
])
def test_a_huge_string_in_a_config_is_refused_with_a_short_message(tmp_path, data, words):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"train": {"max_steps": 5}, **data}))
    assert words in str(err.value) and len(str(err.value)) < 400, str(err.value)[:400]


@pytest.mark.parametrize("override,key", [
    ("train.lr=-0.001", "train.lr"), ("train.lr=nan", "train.lr"), ("train.lr=.inf", "train.lr"),
    ("decode.length_penalty=nan", "decode.length_penalty"), ("decode.max_len_a=-1", "decode.max_len_a"),
    ("train.betas=[0.9, 1.5]", "train.betas[1]"), ("train.lr_multipliers={emb: -1}", "train.lr_multipliers.emb"),
    ("model.dropout=1.0", "model.dropout"), ("train.seed=-1", "train.seed"), ("train.threads=-2", "train.threads"),
    ("tokenizer.character_coverage=0", "tokenizer.character_coverage"), ("train.eps=-inf", "train.eps"),
    ("tokenizer.character_coverage=0.5", "tokenizer.character_coverage"),
    ("tokenizer.vocab_size=3000000000", "tokenizer.vocab_size"),
])
def test_out_of_range_numbers_name_key_value_and_range(tmp_path, override, key):
    path = write(tmp_path, {"train": {"max_steps": 5}})
    with pytest.raises(ConfigError) as err:
        load_config(path, parse_overrides([override]))
    message = str(err.value)
    value_and_range = r"got -?[\w.]+, allowed: (a finite number|an integer|a number in) .+"
    assert re.fullmatch(rf"{re.escape(f'{path}: {key}: ')}{value_and_range}", message), message


def test_sections_built_in_code_are_checked_too():
    with pytest.raises(ConfigError, match=r"decode.length_penalty: got nan, allowed: a number in \[0, 10\]"):
        DecodeConfig(length_penalty=math.nan)
    assert math.inf not in Range(0.0) and 0.0 not in Range(0.0, low_open=True) and 1.0 in Range(0.0, 1.0)
    assert Range(0.0, 1.0, high_open=True).describe() == "a number in [0, 1)"


@pytest.mark.parametrize("value", [
    "&a x\nrun_root: *a",
    '&a0 ["lol", "lol", "lol"]\nrun_root: [*a0, *a0]',
    '[&a0 ["lol", "lol"], [*a0, *a0]]',
])
def test_yaml_anchors_and_aliases_are_refused(tmp_path, value):
    path = write(tmp_path, "train:\n  max_steps: 5\nname: " + value + "\n")
    with pytest.raises(ConfigError, match=r"c\.yaml line 3: .*anchors and aliases") as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_deep_nesting_is_a_config_error(tmp_path):
    path = write(tmp_path, "name: " + "[" * 5000 + "]" * 5000 + "\ntrain:\n  max_steps: 5\n")
    with pytest.raises(ConfigError, match=r"c\.yaml line 1: .*nested deeper"):
        load_config(path)
    with pytest.raises(ConfigError, match="name"):
        load_config(write(tmp_path, {"train": {"max_steps": 5}}), parse_overrides(["name=" + "[" * 5000 + "]" * 5000]))


@pytest.mark.parametrize("text,key,line", [
    ("train:\n  max_steps: 5\ntrain:\n  lr: 0.1\n", "train", 3),
    ("train:\n  lr: 0.1\n  max_steps: 5\n  lr: 0.2\n", "lr", 4),
    ("data:\n  train_corpora:\n  - {a: 1, a: 2}\n", "a", 3),
])
def test_duplicate_keys_are_refused(tmp_path, text, key, line):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"c\.yaml line {line}: .*duplicate key '{key}'") as err:
        load_config(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("data", [
    {"name": list(range(5_000))}, {"name": "." + "y" * 5_000}, {"model": {"arch": "z" * 5_000}},
    {"train": {"max_steps": 5, "lr": "x" * 5_000}}, {"z" * 5_000: 1},
    {"data": {"dataset": "files", "train_corpora": [["a"] * 5_000]}},
])
def test_messages_show_a_bounded_value(tmp_path, data):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, {"train": {"max_steps": 5}, **data}))
    assert len(str(err.value)) < 400, str(err.value)[:400]


def test_set_fills_an_empty_section(tmp_path):
    path = write(tmp_path, "train:\n  max_steps: 5\ndecode:\n")
    assert load_config(path, {"decode.beam": 2}).decode.beam == 2
    with pytest.raises(ConfigError, match=r"c\.yaml: override 'train\.lr\.x': 'lr' is not a section"):
        load_config(path, {"train.lr": 0.1, "train.lr.x": 1})


@pytest.mark.parametrize("dataset", ["sample", "multi30k"])
@pytest.mark.parametrize("key,value", [(key, "f.txt") for key in (
    "train_src", "train_tgt", "val_src", "val_tgt", "test_src", "test_tgt")])
def test_file_keys_need_dataset_files(tmp_path, dataset, key, value):
    path = write(tmp_path, {"train": {"max_steps": 5}, "data": {"dataset": dataset, key: value}})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}: data.{key}:" in str(err.value) and dataset in str(err.value)


def test_character_coverage_bounds_are_what_sentencepiece_accepts():
    bounds = next(f for f in dataclasses.fields(TokenizerConfig) if f.name == "character_coverage").metadata["bounds"]

    def trains(coverage: float) -> bool:
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter([f"word{i} and more text" for i in range(50)]), model_writer=io.BytesIO(),
                vocab_size=40, character_coverage=coverage, hard_vocab_limit=False, minloglevel=2)
        except RuntimeError:
            return False
        return True

    assert trains(bounds.low) and trains(bounds.high)
    assert not trains(bounds.low - 0.001) and not trains(bounds.high + 0.001)
