"""Atomic, verified checkpoints that load as data, never as code.

File layout: a magic line, the sha256 of the body, then the body written by `torch.save`. Loading
checks the digest first, so a truncated or corrupted file is refused before anything is unpickled,
and then reads the body with `weights_only=True`.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import torch

from nmt.utils import atomic_output

MAGIC = b"NMTCKPT1\n"


class CheckpointError(Exception):
    """A checkpoint that is missing, truncated, corrupt or incompatible."""


def save_checkpoint(payload: dict[str, Any], path: str | Path) -> None:
    """Write `payload` to `path` atomically: temporary file in the same folder, fsync, rename."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    digest = hashlib.sha256(body).hexdigest().encode()
    with atomic_output(path, "wb") as handle:
        handle.write(MAGIC + digest + b"\n")
        handle.write(body)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and verify a checkpoint; raises CheckpointError naming the file on any problem."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: checkpoint not found") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint ({err.strerror})") from None
    header_len = len(MAGIC) + 65
    if not data.startswith(MAGIC) or len(data) < header_len:
        raise CheckpointError(f"{path}: not an nmt checkpoint (bad header)")
    digest, body = data[len(MAGIC):header_len - 1], data[header_len:]
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise CheckpointError(f"{path}: checkpoint is truncated or corrupt (checksum mismatch)")
    try:
        payload = torch.load(io.BytesIO(body), map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same thing here
        raise CheckpointError(f"{path}: checkpoint cannot be read as data ({type(err).__name__})") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: checkpoint does not hold a mapping")
    return payload


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """The first checkpoint's inference payload with the element-wise mean of all their weights.

    Every checkpoint must have the same model settings; integer buffers are taken from the first.
    """
    states = [load_checkpoint(path) for path in paths]
    first = states[0]
    for path, state in zip(paths[1:], states[1:]):
        if state.get("model_config") != first.get("model_config"):
            raise CheckpointError(f"{path}: model settings differ from {paths[0]}; cannot average")
    averaged = {}
    for key, value in first["model"].items():
        if value.is_floating_point():
            averaged[key] = (sum(state["model"][key].double() for state in states) / len(states)).to(value.dtype)
        else:
            averaged[key] = value
    keep = ("config", "model_config", "vocab", "tokenizer", "tokenizer_id")
    latest = max(states, key=lambda state: state.get("progress", {}).get("step", 0))
    return {k: first[k] for k in keep if k in first} | {
        "model": averaged, "averaged": [str(p) for p in paths], "progress": latest.get("progress", {})}
