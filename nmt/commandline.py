"""What every console command shares: one-line errors, the parser, number checks, config loading, logging,
the device, and the decoding flags. The commands in nmt/cli.py and the modules under benchmarks/ use these."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import torch

from nmt.checkpoint import CheckpointError
from nmt.config import AUTO, STOP_RULES, UNTUNED_PENALTY, Config, ConfigError, Range, load_config
from nmt.data import DataError
from nmt.export import ExportError
from nmt.fileio import FileError, describe_os_error
from nmt.models import check_model_config
from nmt.rundir import RunDir
from nmt.runlock import RunLockError
from nmt.signals import Interrupted, exit_status, terminate_cleanly
from nmt.tokenizer import TokenizerError
from nmt.train import TrainingError
from nmt.utils import resolve_device

if TYPE_CHECKING:
    from nmt.translator import Translator

USER_ERRORS = (ConfigError, DataError, CheckpointError, TokenizerError, TrainingError, FileError, RunLockError,
               ExportError)
TRACEBACK_ENV = "NMT_TRACEBACK"  # set to 1 to see the traceback of an unexpected error
UNIT = Range(0.0, 1.0)
DECODE_FLAGS = ("beam", "length_penalty", "stop", "max_len_a", "max_len_b", "batch_tokens", "max_source_tokens")


def command(func: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Run a command, turning every error into one line on stderr and a non-zero exit status."""

    @functools.wraps(func)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            with terminate_cleanly():
                return func(argv)
        except USER_ERRORS as err:
            print(f"error: {err}", file=sys.stderr)
        except Interrupted as err:
            print(f"error: stopped by {err}; files being written were discarded, earlier ones are intact",
                  file=sys.stderr)
            return exit_status(err.signum)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except SystemExit as done:  # argparse: --help (0) or a bad flag (2, its one line already printed)
            return done.code if isinstance(done.code, int) else 1
        except BrokenPipeError:
            return 1
        except OSError as err:
            print(f"error: {describe_os_error(err)}", file=sys.stderr)
        except torch.OutOfMemoryError:
            print("error: out of memory on the device; lower train.batch_tokens (training) or --batch-tokens "
                  "(decoding)", file=sys.stderr)
        except Exception as err:  # noqa: BLE001 - the last line of defence: one line, never a traceback
            if os.environ.get(TRACEBACK_ENV):
                raise
            if _peer_gone(err):
                print("error: another process of this torchrun job stopped, so this one cannot go on; its own "
                      "error line says why", file=sys.stderr)
                return 1
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            print(f"error: unexpected {type(err).__name__}: {first} (set {TRACEBACK_ENV}=1 to see where; please "
                  "report it)", file=sys.stderr)
        return 1

    return wrapper


def _peer_gone(err: Exception) -> bool:
    """Whether a collective failed because another rank's process ended (gloo and NCCL say it in their words)."""
    import torch.distributed as dist

    text = str(err)
    return (dist.is_available() and dist.is_initialized() and isinstance(err, RuntimeError)
            and (isinstance(err, dist.DistError) or "closed by peer" in text or "reset by peer" in text))


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (its usage block stays in --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def number(bounds: Range, integer: bool = False) -> Callable[[str], float]:
    """An argparse type: a number within `bounds` (NaN and infinity never are)."""

    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            value = None
        if value is None or value not in bounds:
            raise argparse.ArgumentTypeError(f"got {text!r}, allowed: {bounds.describe(integer)}")
        return value

    return parse


def load(path: str, overrides: list[str]) -> Config:
    """Load and fully check a config (including model registry names) before any data is read."""
    cfg = load_config(path, overrides)
    try:
        check_model_config(cfg.model)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return cfg


def config_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A command's parser that takes a config file and --set overrides."""
    parser = Parser(prog=prog, description=doc)
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.lr=3e-4 (repeatable)")
    return parser


def setup_logging(run_dir: Path | None = None, rank: int = 0) -> None:
    """Log lines to stderr (rank 0 at INFO, the others WARNING), and rank 0's also to the run's train.log."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if run_dir is not None and rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(RunDir(run_dir).log, encoding="utf-8"))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    # A full disk must surface once, as the checkpoint's one-line error, not as a traceback per log line.
    logging.raiseExceptions = False


def device(name: str) -> torch.device:
    """The torch device of a --device flag or train.device setting (auto, cpu, cuda, cuda:N); ConfigError if
    it is not available."""
    try:
        return resolve_device(name)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def command_line(prog: str, argv: list[str] | None) -> str:
    """The command as the user typed it, for reports (`argv` None: this process's own arguments)."""
    return shlex.join([prog, *(sys.argv[1:] if argv is None else argv)])


def flag(key: str) -> str:
    """The command-line flag of a decoding setting."""
    return "--" + key.replace("_", "-")


def add_decode_args(parser: argparse.ArgumentParser) -> None:
    """The decoding flags. Their values are checked by DecodeConfig, with the model's stored settings, so a
    config key and its flag obey one rule."""
    group = parser.add_argument_group("decoding (default: the settings stored with the model)")
    group.add_argument("--beam", type=int, help="beam size (1: greedy search)")
    group.add_argument("--length-penalty", type=float,
                       help=f"GNMT length penalty alpha (a model whose stored value is still auto decodes at "
                            f"{UNTUNED_PENALTY})")
    group.add_argument("--stop", choices=STOP_RULES,
                       help="beam search ends a sentence once beam hypotheses have finished (finished), or only "
                            "when no unfinished one could still beat them under the penalty (bound: searches longer, "
                            "favours long outputs at a large penalty)")
    group.add_argument("--max-len-a", type=float, help="outputs stop at a * source length + b subwords")
    group.add_argument("--max-len-b", type=int, help="outputs stop at a * source length + b subwords")
    group.add_argument("--batch-tokens", type=int, help="source tokens per decoding batch")
    group.add_argument("--max-source-tokens", "--max-tokens", type=int,
                       help="longer sources are truncated to this many subwords")
    group.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    group.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                       help="autocast precision of a checkpoint (bf16/fp16 mainly on CUDA); an export decodes at "
                            "the quantization it was exported with")


def translator_from_args(paths: list[str], args: argparse.Namespace, **extra: int | None) -> Translator:
    """The translator for the models on the command line, with the decoding flags applied and checked."""
    from nmt.translator import load_translator

    changes = {key: getattr(args, key) for key in DECODE_FLAGS} | extra
    translator = load_translator(paths, device(args.device), args.precision, changes, flag)
    if translator.decode.length_penalty == AUTO and not getattr(args, "tune_length_penalty", False):
        print(f"warning: {paths[0]}: its length penalty is auto but was never tuned; decoding at {UNTUNED_PENALTY} "
              f"(choose one with nmt-evaluate {paths[0]} --split val --tune-length-penalty, or give --length-penalty)",
              file=sys.stderr)
    return translator
