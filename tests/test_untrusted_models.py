"""Untrusted models (issue 46, points 1-7): a downloaded Hugging Face folder and an nmt checkpoint are input that may
be hostile. Pipes, devices and oversized files are refused before they are read; a shard index cannot reach outside
its folder; missing, misshapen and non-finite tensors are refused by name; an absurd size is refused before anything
of that size is allocated; and each refusal is one line. Where the case is about the process (a hang, memory, what
reaches stderr, the working folder), the real `python -m nmt` process runs it, under an address-space limit that an
import of a tiny model stays far below."""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from nmt.checkpoint import load_checkpoint, load_model, save_checkpoint
from nmt.cli import import_main
from nmt.config import ModelConfig
from nmt.errors import CheckpointError
from nmt.fileio import sha256_file
from nmt.models import check_weights
from nmt.tokenizer import VocabInfo
from tests.conftest import REPO, untrained_run

pytestmark = pytest.mark.skipif(find_spec("transformers") is None, reason="the hf extra is not installed")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub: every folder is local
MEMORY = 3 << 30  # the child's address space: a tiny import needs well under 1 GiB of it
LINES = (REPO / "data" / "sample" / "train.de").read_text(encoding="utf-8").splitlines()


def _spm_and_table() -> tuple[bytes, list[str]]:
    """A small sentencepiece model and Marian's table of it: </s> 0, <unk> 1, the pieces, <pad> last."""
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(LINES), model_writer=writer, vocab_size=100,
                                   model_type="unigram", minloglevel=2, num_threads=1)
    model = spm.SentencePieceProcessor(model_proto=writer.getvalue())
    pieces = sorted(model.id_to_piece(i) for i in range(model.get_piece_size())
                    if not (model.is_control(i) or model.is_unknown(i)))
    return writer.getvalue(), ["</s>", "<unk>", *pieces, "<pad>"]


@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A tiny random MarianMTModel saved by transformers in OPUS-MT's layout (model.safetensors, config.json,
    generation_config.json, source.spm, target.spm, vocab.json), and its full state dict."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    folder = tmp_path_factory.mktemp("opus") / "opus-mt-de-en"
    proto, table = _spm_and_table()
    pad = len(table) - 1
    config = MarianConfig(vocab_size=len(table), decoder_vocab_size=len(table), d_model=16, encoder_layers=1,
                          decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_attention_heads=2,
                          decoder_attention_heads=2, activation_function="swish", scale_embedding=True,
                          max_position_embeddings=64, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad)
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    model.generation_config = GenerationConfig(decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad,
                                               num_beams=4, max_length=32)
    model.save_pretrained(str(folder))
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes(proto)
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(table)}), encoding="utf-8")
    return folder, {key: value.detach().clone() for key, value in model.state_dict().items()}


@pytest.fixture(scope="module")
def reference(marian, tmp_path_factory) -> dict[str, torch.Tensor]:
    """The weights of the plain folder's import."""
    out = tmp_path_factory.mktemp("reference") / "plain.pt"
    assert import_main([str(marian[0]), "--output", str(out)]) == 0
    return load_checkpoint(out)["model"]


def _copy(marian: tuple[Path, dict], tmp_path: Path, name: str = "opus-mt-de-en") -> Path:
    folder = tmp_path / name
    shutil.copytree(marian[0], folder)
    return folder


def _edit_json(path: Path, **changes: object) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **changes}), encoding="utf-8")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _process(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m nmt ARGV` with its address space limited, killed if it runs a minute (a hang)."""
    return subprocess.run([sys.executable, "-m", "nmt", *argv], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, preexec_fn=_limit_memory,
                          env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})


def _refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit status 1 and one line on stderr, naming each of `words`."""
    err = proc.stderr
    assert proc.returncode == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "unexpected" not in err and all(word in err for word in words), err


def _import_fails(folder: Path, tmp_path: Path, capsys, *words: str) -> None:
    out = tmp_path / "out.pt"
    assert import_main([str(folder), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "unexpected" not in err, err
    assert all(word in err for word in words), err
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- 1: pipes, devices


@pytest.mark.parametrize("case", ["config.json is a pipe", "target_vocab.json is a pipe",
                                  "transformers_weights names a pipe", "config.json links to /dev/zero"])
def test_a_pipe_or_a_device_in_place_of_a_file_is_refused_by_the_process(marian, tmp_path, case):
    folder = _copy(marian, tmp_path)
    if case == "config.json is a pipe":
        (folder / "config.json").unlink()
        os.mkfifo(folder / "config.json")
        culprit, kind = "config.json", "named pipe"
    elif case == "target_vocab.json is a pipe":
        (folder / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}), encoding="utf-8")
        os.mkfifo(folder / "target_vocab.json")
        culprit, kind = "target_vocab.json", "named pipe"
    elif case == "transformers_weights names a pipe":
        _edit_json(folder / "config.json", transformers_weights="weights.safetensors")
        os.mkfifo(folder / "weights.safetensors")
        culprit, kind = "weights.safetensors", "named pipe"
    else:
        (folder / "config.json").unlink()
        (folder / "config.json").symlink_to("/dev/zero")
        culprit, kind = "config.json", "character device"
    _refused(_process("import", str(folder), "--output", str(tmp_path / "out.pt")), culprit, kind)
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize("name", ["generation_config.json", "tokenizer_config.json", "source.spm", "vocab.json",
                                  "model.safetensors"])
def test_every_file_the_import_reads_is_checked_before_it_is_opened_for_reading(marian, tmp_path, capsys, name):
    folder = _copy(marian, tmp_path)
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)
    _import_fails(folder, tmp_path, capsys, name, "named pipe")


def test_a_file_larger_than_its_bound_is_refused_unread(marian, tmp_path, capsys):
    folder = _copy(marian, tmp_path)
    with (folder / "vocab.json").open("r+b") as handle:
        handle.truncate(65 << 20)  # sparse: nothing is written, and nothing may be read
    _import_fails(folder, tmp_path, capsys, "vocab.json", "more than the 67,108,864")


# ---------------------------------------------------------------------------------------------- 2: shards


def _shard(folder: Path, state: dict[str, torch.Tensor], bin_format: bool) -> list[str]:
    """Replace the folder's weights by two shards and their index (transformers' sharded layout)."""
    from safetensors.torch import save_file

    (folder / "model.safetensors").unlink()
    keys = sorted(state)
    suffix = "bin" if bin_format else "safetensors"
    names = [f"model-0000{i}-of-00002.{suffix}" for i in (1, 2)]
    parts = {names[0]: keys[:len(keys) // 2], names[1]: keys[len(keys) // 2:]}
    for name, part in parts.items():
        tensors = {key: state[key].contiguous() for key in part}
        if bin_format:
            torch.save(tensors, folder / name)
        else:
            save_file(tensors, str(folder / name))
    index = "pytorch_model.bin.index.json" if bin_format else "model.safetensors.index.json"
    (folder / index).write_text(json.dumps({"metadata": {}, "weight_map": {
        key: name for name, part in parts.items() for key in part}}), encoding="utf-8")
    return [index, *names]


@pytest.mark.parametrize("layout", ["safetensors", "bin", "sharded safetensors", "sharded bin", "hub cache",
                                    "no final_logits_bias"])
def test_every_opus_mt_layout_imports_and_records_the_files_it_read(marian, reference, tmp_path, layout):
    from safetensors.torch import load_file, save_file

    folder = _copy(marian, tmp_path)
    weights = ["model.safetensors"]
    if layout == "bin":  # OPUS-MT's older uploads: every tensor, the tied ones under each of their names
        torch.save(marian[1], folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
        weights = ["pytorch_model.bin"]
    elif layout.startswith("sharded"):
        weights = _shard(folder, marian[1], layout.endswith("bin"))
    elif layout == "hub cache":  # huggingface_hub's cache: each file a link into ../../blobs/
        blobs = tmp_path / "blobs"
        blobs.mkdir()
        for path in list(folder.iterdir()):
            blob = blobs / sha256_file(path)
            path.rename(blob)
            path.symlink_to(os.path.relpath(blob, folder))
    elif layout == "no final_logits_bias":  # transformers reads it as zeros, as the fixture's are
        tensors = load_file(str(folder / "model.safetensors"))
        del tensors["final_logits_bias"]
        save_file(tensors, str(folder / "model.safetensors"))
    (folder / "README.md").write_text("# a model card, which the import does not read\n", encoding="utf-8")
    assert import_main([str(folder), "--output", str(tmp_path / "out.pt")]) == 0
    checkpoint = load_checkpoint(tmp_path / "out.pt")
    assert checkpoint["model"].keys() == reference.keys()
    assert all(torch.equal(value, reference[key]) for key, value in checkpoint["model"].items())
    read = ["config.json", "generation_config.json", "vocab.json", "source.spm", "target.spm", *weights]
    assert checkpoint["progress"]["imported"]["files"] == {name: sha256_file(folder / name) for name in read}


@pytest.mark.parametrize("where", ["absolute", "parent"])
def test_a_shard_index_naming_a_file_outside_the_folder_is_refused(marian, tmp_path, capsys, where):
    folder = _copy(marian, tmp_path)
    torch.save(marian[1], folder / "pytorch_model.bin")  # what an older import wanted to see before any index
    names = _shard(folder, marian[1], bin_format=False)
    outside = tmp_path / names[1]
    (folder / names[1]).rename(outside)
    shard = str(outside) if where == "absolute" else f"../{names[1]}"
    index = folder / names[0]
    _edit_json(index, weight_map={key: shard if name == names[1] else name
                                  for key, name in json.loads(index.read_text(encoding="utf-8"))["weight_map"].items()})
    _import_fails(folder, tmp_path, capsys, "model.safetensors.index.json", f"the shard '{shard[:20]}",
                  "not a file name inside")


# ---------------------------------------------------------------------------------------------- 3, 4: tensors


@pytest.mark.parametrize("case", ["missing", "NaN", "infinity"])
def test_a_missing_or_non_finite_tensor_is_refused_by_name(marian, tmp_path, capsys, case):
    from safetensors.torch import load_file, save_file

    folder = _copy(marian, tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    name = "model.encoder.layers.0.fc1.weight"
    if case == "missing":
        del tensors[name]
    else:
        tensors[name] = torch.full_like(tensors[name], float("nan") if case == "NaN" else float("inf"))
    save_file(tensors, str(folder / "model.safetensors"))
    _import_fails(folder, tmp_path, capsys, name, "no tensor" if case == "missing" else "NaN or infinite")


def test_a_shape_mismatch_is_one_line_on_stderr(marian, tmp_path):
    folder = _copy(marian, tmp_path)
    _edit_json(folder / "config.json", encoder_ffn_dim=48, decoder_ffn_dim=48)
    proc = _process("import", str(folder), "--output", str(tmp_path / "out.pt"))
    _refused(proc, "has shape", "config.json implies", "48")


# ---------------------------------------------------------------------------------------------- 5: absurd sizes


@pytest.mark.parametrize(("changes", "words"), [
    ({"vocab_size": 40_000_000, "decoder_vocab_size": 40_000_000}, ("vocab.json", "vocab_size 40,000,000")),
    ({"d_model": 65536}, ("has shape", "config.json implies", "65536]"))], ids=["vocab_size", "d_model"])
def test_absurd_sizes_in_config_json_are_refused_before_allocating(marian, tmp_path, changes, words):
    folder = _copy(marian, tmp_path)
    _edit_json(folder / "config.json", **changes)
    _refused(_process("import", str(folder), "--output", str(tmp_path / "out.pt")), *words)


@pytest.fixture(scope="module")
def enormous(tmp_path_factory) -> Path:
    """A tiny nmt checkpoint whose stored config asks for d_model 65536 (a model of tens of gigabytes)."""
    folder = tmp_path_factory.mktemp("enormous")
    payload = load_checkpoint(untrained_run(folder) / "checkpoints" / "best.pt")
    payload["config"]["model"].update(d_model=65536, ffn_dim=65536)
    save_checkpoint(payload, folder / "enormous.pt")
    return folder / "enormous.pt"


@pytest.mark.parametrize("command", [["translate", "-c"], ["export", "--format", "huggingface", "--output", "hf"]],
                         ids=["nmt-translate", "nmt-export"])
def test_a_small_checkpoint_asking_for_an_enormous_model_is_refused_before_allocating(enormous, tmp_path, command):
    argv = [*command, str(enormous)] if command[0] == "translate" else [command[0], str(enormous), *command[1:]]
    _refused(_process(*argv, cwd=tmp_path), "enormous.pt", "does not match its config", "its settings ask for",
             "65536]")


def test_settings_whose_computed_tables_are_absurd_are_refused_before_allocating():
    cfg = ModelConfig(d_model=512, heads=8, max_positions=1_000_000)
    with pytest.raises(CheckpointError, match=r"max_positions 1000000.*1,024,000,000 computed position values"):
        check_weights(cfg, VocabInfo(100, 100, True), {})


# ---------------------------------------------------------------------------------------------- 6: odd JSON


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "vocab.json"])
def test_json_nested_100000_deep_is_an_ordinary_error(marian, tmp_path, capsys, name):
    folder = _copy(marian, tmp_path)
    (folder / name).write_text('{"a": ' * 100_000 + "1" + "}" * 100_000, encoding="utf-8")
    _import_fails(folder, tmp_path, capsys, name, "nested too deeply")


def test_null_generation_settings_take_the_defaults(marian, tmp_path):
    folder = _copy(marian, tmp_path)
    _edit_json(folder / "generation_config.json", num_beams=None, length_penalty=None, pad_token_id=None,
               eos_token_id=None, decoder_start_token_id=None)  # transformers 5 writes null for a default
    assert import_main([str(folder), "--output", str(tmp_path / "out.pt")]) == 0
    loaded = load_model(tmp_path / "out.pt", torch.device("cpu"))
    assert (loaded.cfg.decode.beam, loaded.cfg.decode.length_penalty) == (1, 1.0)


def test_a_generation_setting_of_the_wrong_type_is_refused(marian, tmp_path, capsys):
    folder = _copy(marian, tmp_path)
    _edit_json(folder / "generation_config.json", num_beams="four")
    _import_fails(folder, tmp_path, capsys, "generation_config.json", "num_beams", "'four'")


# ---------------------------------------------------------------------------------------------- 7: folder names


def test_a_folder_named_like_a_download_imports_from_inside_it(marian, tmp_path):
    folder = _copy(marian, tmp_path, "opus mt (copy)")
    proc = _process("import", ".", "--output", "../out.pt", cwd=folder)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert load_checkpoint(tmp_path / "out.pt")["config"]["name"] == "opus_mt_copy"


def test_a_folder_named_like_a_download_imports_by_its_name(marian, tmp_path):
    folder = _copy(marian, tmp_path, "opus-mt-de-en (1)")
    assert import_main([str(folder), "--output", str(tmp_path / "out.pt")]) == 0
    assert load_checkpoint(tmp_path / "out.pt")["config"]["name"] == "opus-mt-de-en_1"
