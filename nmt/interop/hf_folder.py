"""Reading a Hugging Face model folder as untrusted input: regular files of bounded size inside it, each one's
sha256 kept, weights read as data and checked tensor by tensor."""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from nmt.errors import ExportError, FileError, short_repr
from nmt.fileio import cause, read_regular
from nmt.model_formats import HF_TOKENIZER_FILES, HF_WEIGHT_FILES

INDEX = ".index.json"
MAX_FILE_BYTES = 64 << 20  # a JSON or sentencepiece file
MAX_WEIGHT_BYTES = 16 << 30  # one weights file or shard


def _plain(name: Any) -> bool:
    """True for a file name with no folder part: it names a file inside the folder, and nothing else."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


class ModelFolder:
    """A model folder whose files are read once each, checked, and recorded (name -> sha256) in `digests`."""

    def __init__(self, path: Path) -> None:
        if not path.is_dir():
            raise ExportError(f"{path}: not a folder (give a local Marian/OPUS-MT model folder)")
        self.path = path
        self.digests: dict[str, str] = {}

    def has(self, name: str) -> bool:
        """True when the folder holds an entry `name` of any kind (reading it says what is wrong with it)."""
        return (self.path / name).is_symlink() or (self.path / name).exists()

    def read(self, name: str, limit: int = MAX_FILE_BYTES) -> bytes:
        """The bytes of the file `name`, a regular file of at most `limit` bytes inside the folder."""
        if not _plain(name):
            raise ExportError(f"{self.path}: {short_repr(name)} is not the name of a file inside the folder")
        path = self.path / name
        try:
            data = read_regular(path, limit=limit)
        except FileNotFoundError:
            raise ExportError(f"{path}: missing; a Marian folder holds config.json, {' or '.join(HF_WEIGHT_FILES)} "
                              f"(or a shard index), {', '.join(HF_TOKENIZER_FILES)}") from None
        except OSError as err:
            raise ExportError(f"{path}: cannot read ({cause(err)})") from None
        except FileError as err:
            raise ExportError(str(err)) from None
        self.digests[name] = hashlib.sha256(data).hexdigest()
        return data

    def json(self, name: str) -> Any:
        """The JSON value of the file `name`."""
        data = self.read(name)
        try:
            return json.loads(data.decode("utf-8"))
        except RecursionError:
            raise ExportError(f"{self.path / name}: nested too deeply to be a model's JSON") from None
        except ValueError as err:
            raise ExportError(f"{self.path / name}: not readable JSON ({err})") from None

    def json_object(self, name: str, optional: bool = False) -> dict[str, Any]:
        """The JSON object of the file `name` ({} when `optional` and absent)."""
        if optional and not self.has(name):
            return {}
        found = self.json(name)
        if not isinstance(found, dict):
            raise ExportError(f"{self.path / name}: not a JSON object")
        return found

    def weight_files(self, config: dict[str, Any]) -> list[str]:
        """The weights files, chosen as transformers chooses them: config.json's `transformers_weights`, else the
        first of HF_WEIGHT_FILES (or its shard index) present."""
        explicit = config.get("transformers_weights")
        if explicit is not None and not _plain(explicit):
            raise ExportError(f"{self.path / 'config.json'}: transformers_weights {short_repr(explicit)} is not the "
                              "name of a file inside the folder")
        candidates = ([explicit] if explicit
                      else [name for single in HF_WEIGHT_FILES for name in (single, single + INDEX)])
        found = next((name for name in candidates if self.has(name)), None)
        if found is None:
            raise ExportError(f"{self.path}: no weights ({' or '.join(candidates)})")
        if not found.endswith(INDEX):
            return [found]
        index = self.json(found)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ExportError(f"{self.path / found}: not a shard index (no weight_map of tensor names to files)")
        shards = list(dict.fromkeys(weight_map.values()))
        for shard in shards:
            if not _plain(shard):
                raise ExportError(f"{self.path / found}: the shard {short_repr(shard)} is not a file name inside "
                                  f"{self.path}; an index may only name files beside it")
        return shards

    def tensors(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Every tensor of the weights files `names` (.safetensors, or a .bin read weights-only)."""
        out: dict[str, torch.Tensor] = {}
        where: dict[str, str] = {}
        for name in names:
            if not name.endswith((".safetensors", ".bin")):
                raise ExportError(f"{self.path / name}: not a weights file (.safetensors or .bin)")
            for key, value in self._load(name).items():
                if key in out:
                    raise ExportError(f"{self.path}: tensor {short_repr(key)} is in both {where[key]} and {name}")
                out[key], where[key] = value, name
        return out

    def _load(self, name: str) -> dict[str, torch.Tensor]:
        data = self.read(name, MAX_WEIGHT_BYTES)
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load

                found = load(data)
            else:
                with warnings.catch_warnings():  # torch's warnings about a foreign file would add lines to the error
                    warnings.simplefilter("ignore")
                    found = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - a broken file fails inside safetensors or torch in many ways
            detail = " ".join(str(err).split())[:300]
            raise ExportError(f"{self.path / name}: not readable as weights ({type(err).__name__}: {detail})") \
                from None
        if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                  for k, v in found.items()):
            raise ExportError(f"{self.path / name}: does not hold a mapping of tensor names to tensors")
        return found


def pick_tensors(found: dict[str, torch.Tensor], model: torch.nn.Module, needed: list[str],
                 folder: Path) -> dict[str, torch.Tensor]:
    """The `needed` tensors of `found`, each present (or tied), finite and of the shape `model` gives it."""
    state = model.state_dict(keep_vars=True)
    tied: dict[int, list[str]] = {}
    for key, value in state.items():
        tied.setdefault(id(value), []).append(key)
    for key, value in sorted(found.items()):  # by name: the file's own order need not be stable
        if key in state and value.shape != state[key].shape:
            raise ExportError(f"{folder}: tensor {key} has shape {list(value.shape)}, config.json implies "
                              f"{list(state[key].shape)}")
    out = {}
    for key in needed:
        if key not in state:
            raise ExportError(f"{folder}: transformers' {type(model).__name__} has no tensor {key}; use the "
                              "transformers version in pyproject.toml")
        names = tied[id(state[key])]
        name = key if key in found else next((n for n in names if n in found), None)
        if name is None:
            raise ExportError(f"{folder}: the weights have no tensor {key}" + (
                f" (nor {', '.join(n for n in names if n != key)}, tied to it)" if len(names) > 1 else ""))
        if not torch.isfinite(found[name]).all():
            raise ExportError(f"{folder}: tensor {name} holds NaN or infinite values")
        out[key] = found[name]
    return out
