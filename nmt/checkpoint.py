"""The one checkpoint type: a versioned bundle, saved atomically and verified, loaded as data, never as code.

Version 3 is a `torch.save` zip archive whose comment holds the sha256 of everything before the comment's length
field, checked before anything is unpickled. It holds a flat mapping of plain data, readable with
`torch.load(path, weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config, config_from_dict, to_dict
from nmt.errors import CheckpointError, ConfigError, FileError, TokenizerError
from nmt.fileio import atomic_output, cause, read_regular
from nmt.models import Seq2Seq, build_model, check_weights
from nmt.run.folder import RunDir
from nmt.tokenizer import Tokenizer

ZIP_START, ZIP_END = b"PK\x03\x04", b"PK\x05\x06"  # a zip's first record; its 22-byte end record
DIGEST_NOTE = b"nmt-checkpoint sha256="
NOTE_LENGTH = len(DIGEST_NOTE) + 64

VERSION = 3
INFERENCE_KEYS = ("model", "config", "vocab", "tokenizer", "tokenizer_id")
TRAINING_KEYS = ("optimizer", "scaler", "plateau", "sampler", "rng")


@dataclass
class TrainingState:
    """What a resume needs beyond the weights: optimizer, scaler, schedule, data position, RNG."""

    optimizer: dict[str, Any]
    scaler: dict[str, Any]
    plateau: dict[str, Any]
    sampler: dict[str, Any]
    rng: dict[str, Any]  # rank 0's RNG states
    rng_ranks: list[dict[str, Any]] = field(default_factory=list)  # every rank's

    def rng_for(self, rank: int, world: int) -> dict[str, Any]:
        """The RNG states `rank` saved in a run of `world` ranks; CheckpointError if absent."""
        if len(self.rng_ranks) == world:
            return self.rng_ranks[rank]
        if world == 1 and not self.rng_ranks:
            return self.rng
        raise CheckpointError(f"the checkpoint holds RNG states of {len(self.rng_ranks)} ranks, not {world}")


@dataclass
class CheckpointContents:
    """What a checkpoint file holds."""

    config: dict[str, Any]  # to_dict(Config)
    vocab: dict[str, Any]
    tokenizer: bytes
    tokenizer_id: str
    model: dict[str, torch.Tensor]
    progress: dict[str, Any] = field(default_factory=dict)  # trainer's step, elapsed seconds, best list, ...
    training: TrainingState | None = None
    averaged: list[str] = field(default_factory=list)  # sources of an averaged bundle
    version: int = VERSION

    @classmethod
    def build(cls, cfg: Config, tokenizer: Tokenizer, model: torch.nn.Module, progress: dict[str, Any],
              training: TrainingState | None = None) -> CheckpointContents:
        """A bundle of a run's parts (the model's own tensors, not copies)."""
        return cls(to_dict(cfg), vars(tokenizer.vocab).copy(), tokenizer.to_bytes(), tokenizer.identity,
                   model.state_dict(), progress, training)

    def payload(self) -> dict[str, Any]:
        """The flat mapping written to disk."""
        out = {"version": VERSION, "model": self.model, "config": self.config, "vocab": self.vocab,
               "tokenizer": self.tokenizer, "tokenizer_id": self.tokenizer_id, "progress": self.progress}
        if self.averaged:
            out["averaged"] = self.averaged
        if self.training is not None:
            out.update(vars(self.training))
        return out

    @classmethod
    def from_payload(cls, payload: dict[str, Any], path: str | Path) -> CheckpointContents:
        """Check a loaded mapping's version and keys."""
        version = payload.get("version")
        if version != VERSION:
            raise CheckpointError(f"{path}: checkpoint format version {version!r}, but this nmt reads version "
                                  f"{VERSION}")
        missing = [k for k in INFERENCE_KEYS if k not in payload]
        if missing:
            raise CheckpointError(f"{path}: not a model checkpoint (version {version}): missing "
                                  f"{', '.join(missing)}")
        for key, kind in (("config", dict), ("vocab", dict), ("tokenizer", bytes), ("tokenizer_id", str),
                          ("model", dict), ("progress", dict)):
            if key in payload and not isinstance(payload[key], kind):
                raise CheckpointError(f"{path}: not a model checkpoint: its {key} is a {type(payload[key]).__name__}, "
                                      f"not a {kind.__name__}")
        if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in payload["model"].items()):
            raise CheckpointError(f"{path}: not a model checkpoint: its weights are not all named tensors")
        training = None
        if all(k in payload for k in TRAINING_KEYS):
            training = TrainingState(*(payload[k] for k in TRAINING_KEYS), list(payload.get("rng_ranks", [])))
        return cls(payload["config"], payload["vocab"], payload["tokenizer"], payload["tokenizer_id"],
                   payload["model"], dict(payload.get("progress", {})), training,
                   list(payload.get("averaged", [])), version)


def save_checkpoint(payload: dict[str, Any], path: str | Path) -> None:
    """Write `payload` atomically as torch.save's archive with its sha256 in the archive comment."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    archive = buffer.getvalue()
    if archive[-22:-18] != ZIP_END or archive[-2:] != b"\0\0":  # torch.save writes no comment of its own
        raise CheckpointError(f"{path}: torch.save wrote an archive this nmt cannot add its checksum to")
    head = archive[:-2]  # all but the comment length, which is 0
    note = DIGEST_NOTE + hashlib.sha256(head).hexdigest().encode()
    with atomic_output(path, "wb") as handle:
        handle.write(head + len(note).to_bytes(2, "little") + note)


def _verified(data: bytes, path: Path) -> bytes:
    """The archive of a checkpoint file's bytes once its sha256 matches; CheckpointError otherwise."""
    if data.startswith(ZIP_START):
        end = len(data) - NOTE_LENGTH - 2  # where the comment length lies
        if end < 20 or data[end - 20:end - 16] != ZIP_END or data[end:-64] != (
                NOTE_LENGTH.to_bytes(2, "little") + DIGEST_NOTE):
            raise CheckpointError(f"{path}: checkpoint is truncated or corrupt, or not written by nmt (no checksum "
                                  "at its end)")
        digest, covered, archive = data[-64:], data[:end], data
    else:
        raise CheckpointError(f"{path}: not an nmt checkpoint (bad header)")
    if hashlib.sha256(covered).hexdigest().encode() != digest:
        raise CheckpointError(f"{path}: checkpoint is truncated or corrupt (checksum mismatch)")
    return archive


def save_contents(contents: CheckpointContents, path: str | Path) -> None:
    """Write a checkpoint file's contents atomically."""
    save_checkpoint(contents.payload(), path)


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Read and verify a checkpoint file as a mapping; raises CheckpointError naming the file on any problem."""
    path = Path(path)
    try:
        body = _verified(read_regular(path), path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: checkpoint not found") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint ({cause(err)})") from None
    except FileError as err:
        raise CheckpointError(str(err)) from None
    try:
        with warnings.catch_warnings():  # keep the error to one line
            warnings.simplefilter("ignore")
            payload = torch.load(io.BytesIO(body), map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same
        raise CheckpointError(f"{path}: checkpoint cannot be read as data ({type(err).__name__})") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: checkpoint does not hold a mapping")
    return payload


def load_contents(path: str | Path, map_location: Any = "cpu") -> CheckpointContents:
    """Read, verify and type-check a checkpoint file."""
    return CheckpointContents.from_payload(load_checkpoint(path, map_location), path)


# ---------------------------------------------------------------------------------------------- inference


@dataclass
class LoadedModel:
    """A model ready for inference, with what it was trained with."""

    model: Seq2Seq
    tokenizer: Tokenizer
    cfg: Config
    path: Path
    progress: dict[str, Any]


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or the best one of a run folder (averaged, then best, then last)."""
    path = Path(path)
    if path.is_dir():
        run = RunDir(path)
        for final in run.finals():
            if final.exists():
                return final
        raise CheckpointError(f"{path}: no checkpoint in this run folder (looked in {run.checkpoints})")
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint not found")
    return path


def load_model(path: str | Path, device: torch.device) -> LoadedModel:
    """Rebuild model, tokenizer and config from a checkpoint (or run folder) alone."""
    ckpt = find_checkpoint(path)
    bundle = load_contents(ckpt)
    try:
        cfg = config_from_dict(bundle.config)
        tokenizer = Tokenizer.from_bytes(bundle.tokenizer)
        check_weights(cfg.model, tokenizer.vocab, bundle.model)  # before building a model of untrusted size
        model = build_model(cfg.model, tokenizer.vocab)
        model.load_state_dict(bundle.model)
    except CheckpointError as err:
        raise CheckpointError(f"{ckpt}: checkpoint does not match its config: {err}") from None
    except (KeyError, ConfigError, TokenizerError, RuntimeError, ValueError, TypeError) as err:
        detail = " ".join(str(err).split())  # load_state_dict gives a line per mismatch
        raise CheckpointError(f"{ckpt}: checkpoint is incomplete or does not match its config ({detail})") from None
    return LoadedModel(model.to(device).eval(), tokenizer, cfg, ckpt, bundle.progress)


# ---------------------------------------------------------------------------------------------- resuming


def load_for_resume(path: str | Path, cfg: Config, tokenizer_id: str, world: int = 1) -> CheckpointContents:
    """A bundle with training state whose vocabulary, model settings and process count match this run (on the CPU)."""
    bundle = load_contents(path)
    if bundle.training is None:
        missing = ", ".join(k for k in TRAINING_KEYS if k not in bundle.payload())
        raise CheckpointError(f"{path}: holds no training state ({missing}); it can be evaluated or averaged, "
                              "not resumed")
    if bundle.tokenizer_id != tokenizer_id:
        raise CheckpointError(f"{path}: the checkpoint was trained with a different vocabulary; "
                              "use a new experiment name or the original data and tokenizer settings")
    sampler = bundle.training.sampler
    saved_world = sampler.get("num_replicas", 1) if isinstance(sampler, dict) else 1
    if saved_world != world:
        raise CheckpointError(f"{path}: saved by a run of {saved_world} process(es), resumed with {world}; resume "
                              f"with torchrun --nproc_per_node {saved_world}, or give --restart")
    mine = to_dict(cfg.model)
    saved = bundle.config.get("model", {})
    changed = sorted(k for k in set(mine) | set(saved) if saved.get(k) != mine.get(k))
    if changed:
        raise CheckpointError(f"{path}: model settings differ from the checkpoint's "
                              f"({', '.join('model.' + k for k in changed)}); refusing to resume")
    return bundle


# ---------------------------------------------------------------------------------------------- averaging


def average_checkpoints(paths: list[Path]) -> CheckpointContents:
    """The first checkpoint's inference bundle with the mean of all their float weights (same settings, tokenizer
    and shapes required); progress of the furthest-trained one."""
    bundles = [load_contents(path) for path in paths]
    first = bundles[0]
    shapes = {key: value.shape for key, value in first.model.items()}
    for path, bundle in zip(paths[1:], bundles[1:]):
        if bundle.config.get("model") != first.config.get("model"):
            raise CheckpointError(f"{path}: model settings differ from {paths[0]}; cannot average")
        if bundle.tokenizer_id != first.tokenizer_id:
            raise CheckpointError(f"{path}: its tokenizer differs from {paths[0]}'s (other subwords or ids); "
                                  "cannot average")
        if {key: value.shape for key, value in bundle.model.items()} != shapes:
            raise CheckpointError(f"{path}: its weights' names or shapes differ from {paths[0]}'s; cannot average")
    averaged = {}
    for key, value in first.model.items():
        if value.is_floating_point():
            averaged[key] = (sum(b.model[key].double() for b in bundles) / len(bundles)).to(value.dtype)
        else:
            averaged[key] = value
    latest = max(bundles, key=lambda b: b.progress.get("step", 0))
    return CheckpointContents(first.config, first.vocab, first.tokenizer, first.tokenizer_id, averaged, latest.progress,
                  averaged=[str(p) for p in paths])


# ---------------------------------------------------------------------------------------------- a run's folder


class RunCheckpoints:
    """A run's checkpoint folder: last.pt (resumable), best.pt, the best k step_N.pt and their average."""

    def __init__(self, run: RunDir, keep_best: int) -> None:
        self.run, self.folder, self.keep_best = run, run.checkpoints, keep_best
        self.dropped: list[str] = []  # step files out of the best k, deleted after the next last.pt

    OWN = (RunDir.LAST, RunDir.BEST, RunDir.AVERAGED, RunDir.STEPS)

    def _cut_off(self) -> list[Path]:
        """Temporary files (.<name>.<random>.tmp) left by killed writes."""
        return [p for name in self.OWN for p in self.folder.glob(f".{name}.*.tmp")]

    def clear(self) -> None:
        """Remove every checkpoint of an earlier run."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for stale in [*self.folder.glob("*.pt"), *self._cut_off()]:
            stale.unlink()

    def tidy(self, best: list[dict[str, Any]]) -> None:
        """After a resume: remove leftover temporary files and step files that `best` does not list."""
        listed = {b["path"] for b in best}
        for stale in [*self._cut_off(), *self.folder.glob(RunDir.STEPS)]:
            if stale.name not in listed:
                stale.unlink(missing_ok=True)

    def save_last(self, bundle: CheckpointContents) -> None:
        """Write last.pt, then delete dropped step files (the previous last.pt listed them until now)."""
        save_contents(bundle, self.run.last)
        for name in self.dropped:
            self.run.checkpoint(name).unlink(missing_ok=True)
        self.dropped = []

    def keep(self, best: list[dict[str, Any]], score: float, step: int, bundle: CheckpointContents) -> None:
        """Write step_`step`.pt if `score` ranks among the best k, best.pt if first; updates `best` in place."""
        improved = not best or score > best[0]["score"]
        if len(best) < self.keep_best or score > best[-1]["score"]:
            path = self.run.step(step)
            save_contents(bundle, path)
            best.append({"score": score, "step": step, "path": path.name})
            best.sort(key=lambda b: -b["score"])
            self.dropped += [old["path"] for old in best[self.keep_best:]]
            del best[self.keep_best:]
        if improved:
            save_contents(bundle, self.run.best)

    def average(self, best: list[dict[str, Any]], k: int) -> CheckpointContents:
        """The average of the best `k` of `best`, not yet written."""
        return average_checkpoints([self.run.checkpoint(b["path"]) for b in best[:k]])

    def final(self, averaged: CheckpointContents | None) -> Path:
        """Write `averaged` to averaged.pt (or remove it, so best.pt is found first); the final model's path."""

        if averaged is None:
            self.run.averaged.unlink(missing_ok=True)
            return self.run.best
        save_contents(averaged, self.run.averaged)
        return self.run.averaged
