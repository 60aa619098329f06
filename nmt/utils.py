"""Small shared helpers: seeding, device choice; atomic output lives in nmt.fileio."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import numpy as np
import torch

from nmt.errors import ConfigError


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) from one number."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """A seed of its own for each rank (so dropout noise differs across ranks), and for each resume step."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """Every global RNG state as plain CPU data, and on a CUDA `device` that device's generator (a CPU run calls
    no CUDA function)."""
    np_state = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]]}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device | None = None) -> None:
    """Restore what `rng_state` returned (from CPU copies)."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"].cpu())
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), *rest))
    saved = state.get("cuda")
    if device is None or device.type != "cuda" or saved is None:
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_rng_state(saved.cpu(), index)


def resolve_device(name: str | torch.device) -> torch.device:
    """The torch device of a name (auto, cpu, cuda, cuda:N) or a torch.device; ConfigError for one not there."""
    if isinstance(name, torch.device):
        name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} was asked for but no CUDA device is available")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device {name[:40]!r}: not a device name (auto, cpu, cuda or cuda:N)") from None


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """One mixed-precision context for fp32, bf16 and fp16 on any device."""
    if precision == "fp32":  # no context at all: a device without autocast (meta, in the tests) trains in fp32
        return contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    return torch.autocast(device.type, dtype=dtype)
