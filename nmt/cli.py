"""Console commands. Each turns bad input into one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import torch

from nmt.checkpoint import CheckpointError, average_checkpoints, load_bundle, save_bundle
from nmt.config import (
    AT_LEAST_ONE,
    AUTO,
    FILES_KEYS,
    NON_NEGATIVE,
    STOP_RULES,
    TUNED_PENALTIES,
    UNTUNED_PENALTY,
    Config,
    ConfigError,
    Range,
    load_config,
    reference_markdown,
)
from nmt.data import DataError, Split, prepare, read_pair, summary
from nmt.export import MANIFEST, ExportError, export_files, is_export
from nmt.fileio import FileError, check_input, check_output, describe_os_error
from nmt.models import check_model_config
from nmt.runlock import RunLockError, run_lock
from nmt.runlog import check_tensorboard
from nmt.signals import Interrupted, exit_status, graceful_stop, signal_name, stop_signal, terminate_cleanly
from nmt.tokenizer import TokenizerError
from nmt.train import TrainingError
from nmt.utils import resolve_device

if TYPE_CHECKING:
    from nmt.translator import Translator

USER_ERRORS = (ConfigError, DataError, CheckpointError, TokenizerError, TrainingError, FileError, RunLockError,
               ExportError)
TRACEBACK_ENV = "NMT_TRACEBACK"  # set to 1 to see the traceback of an unexpected error
UNIT = Range(0.0, 1.0)
log = logging.getLogger("nmt")


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


def _config_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=doc)
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.lr=3e-4 (repeatable)")
    return parser


def _setup_logging(run_dir: Path | None = None, rank: int = 0) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if run_dir is not None and rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(run_dir / "train.log", encoding="utf-8"))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    # A full disk must surface once, as the checkpoint's one-line error, not as a traceback per log line.
    logging.raiseExceptions = False


def _device(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except ValueError as err:
        raise ConfigError(str(err)) from None


RUN_OUTPUTS = ("config.yaml", "train.log", "metrics.jsonl", "eval_test.json", "test.hyp.en", "length_penalty.json",
               "tokenizer/spm.model", "tokenizer/src.model", "tokenizer/tgt.model", "checkpoints/last.pt",
               "checkpoints/best.pt", "checkpoints/averaged.pt")


def _data_inputs(cfg: Config) -> list[tuple[str, str]]:
    """The user's own data files, by config key (the sample and Multi30k files are the program's)."""
    if cfg.data.dataset != "files":
        return []
    return [(f"data.{key}", getattr(cfg.data, key)) for key in FILES_KEYS if getattr(cfg.data, key)] + [
        (f"data.train_corpora[{i}]", path) for i, entry in enumerate(cfg.data.train_corpora) for path in entry]


def _check_data_paths(cfg: Config) -> None:
    """The folders nmt-prepare writes must be folders (or creatable) before any data is read."""
    check_output("data.cache_dir", cfg.data.cache_dir, folder=True)
    if cfg.data.dataset == "multi30k":
        check_output("data.download_dir", cfg.data.download_dir, folder=True)
    for key, path in _data_inputs(cfg):
        check_input(key, path)


def _check_run_paths(cfg: Config) -> None:
    """The run folder must be a folder, and nothing a training writes there may be one of its data files.

    The config file itself may be the run's config.yaml: rewriting it with the resolved config is how a
    run folder records what it ran.
    """
    check_output("run folder (run_root/name)", cfg.run_dir, folder=True)
    inputs = _data_inputs(cfg)
    for name in RUN_OUTPUTS:
        check_output("run file", cfg.run_dir / name, inputs)


@command
def prepare_main(argv: list[str] | None = None) -> int:
    """nmt-prepare CONFIG: read, clean, tokenize and cache the data; print what it did."""
    args = _config_parser("nmt-prepare", prepare_main.__doc__).parse_args(argv)
    cfg = load(args.config, args.overrides)
    _check_data_paths(cfg)
    print(summary(prepare(cfg)))
    return 0


@command
def train_main(argv: list[str] | None = None) -> int:
    """nmt-train CONFIG: prepare (cached), train, then evaluate the best checkpoint on the test split."""
    parser = _config_parser("nmt-train", train_main.__doc__)
    parser.add_argument("--restart", action="store_true",
                        help="start over, deleting the run's earlier checkpoints and metrics")
    parser.add_argument("--no-evaluate", action="store_true",
                        help="skip the final test-set evaluation (decode.length_penalty auto is still tuned on the "
                             "validation split)")
    args = parser.parse_args(argv)
    cfg = load(args.config, args.overrides)
    command_line = _command_line("nmt-train", argv)
    from nmt.distributed import all_true, current, init_distributed, joined, shutdown_distributed

    own_group = not joined()  # a group the caller joined before (a test's worker) stays the caller's to end
    device = init_distributed(cfg.train.device) or _device(cfg.train.device)
    place = current(device)
    # Under torchrun every rank checks, then all agree: a rank that stopped here while the others trained
    # would pair its next collective with theirs. Rank 0 holds the run folder's lock for every rank.
    with contextlib.ExitStack() as held:
        owner, problem = "", None
        try:
            _check_data_paths(cfg)
            _check_run_paths(cfg)
            check_tensorboard(cfg.train.tensorboard)
            _check_fresh_start(cfg, args.restart)
            if place.main:
                owner = held.enter_context(run_lock(cfg.run_dir))
        except USER_ERRORS as err:
            problem = err
        if not all_true(place, problem is None):
            raise problem or RunLockError(f"{cfg.run_dir}: another process of this torchrun job could not start "
                                          "the run (see its error line)")
        status = _train(cfg, args, owner, command_line, device)
    if own_group:  # a run that ended: NCCL's communicators freed, not left to the interpreter's exit
        shutdown_distributed()
    return status


def _check_fresh_start(cfg: Config, restart: bool) -> None:
    """A folder with checkpoints but no last.pt to resume from is emptied only when --restart asks for it."""
    folder = cfg.run_dir / "checkpoints"
    if not restart and not (folder / "last.pt").exists() and any(folder.glob("*.pt")):
        raise CheckpointError(f"{folder}: holds checkpoints of an earlier run but no last.pt to resume from; "
                              "give --restart to delete them and start over, or choose another name")


def _train(cfg: Config, args: argparse.Namespace, previous_owner: str, command_line: str,
           device: torch.device) -> int:
    """The body of nmt-train, run while the run folder is locked."""
    from nmt.checkpoint import load_model
    from nmt.distributed import barrier, current
    from nmt.evaluate import (
        TUNING_SUMMARY,
        evaluate,
        penalty_table,
        split_pair,
        tune_and_store,
        write_json,
        write_report,
    )
    from nmt.evaluate import summary as eval_summary
    from nmt.train import Trainer
    from nmt.translator import from_loaded

    place = current(device)
    trainer_rank = place.rank
    _setup_logging(cfg.run_dir, trainer_rank)
    if previous_owner:
        log.warning("took over the run folder's lock from a training that ended without releasing it (%s)",
                    previous_owner)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    last = cfg.run_dir / "checkpoints" / "last.pt"
    # Rank 0 builds the data cache and tokenizer first; the others then read them (and meet its error, if any).
    if trainer_rank:
        barrier(place)
    try:
        data = prepare(cfg, log=log.info if trainer_rank == 0 else (lambda _msg: None))
    finally:
        if trainer_rank == 0:
            barrier(place)
    if trainer_rank == 0:
        log.info("\n%s", summary(data))
    trainer = Trainer(cfg, data, device)
    _check_validation_lengths(data.splits["val"], trainer.model.max_positions, trainer_rank)
    if last.exists() and not args.restart:
        trainer.resume(last)
    if trainer_rank == 0:  # only now: a refused resume leaves the run's tokenizer as it was
        data.tokenizer.save(cfg.run_dir / "tokenizer")
    try:
        with graceful_stop():
            progress = trainer.fit()
    except FileError as err:
        raise FileError(f"{err}; training stopped at step {trainer.progress.step}") from None
    if trainer.interrupted:  # every rank agrees, also one that received no signal itself
        signum = stop_signal() or signal.SIGTERM
        log.info("stopped by %s at step %d; last.pt is saved: run the same command again to resume",
                 signal_name(signum), progress.step)
        return exit_status(signum)
    if trainer_rank != 0:
        return 0
    log.info("training stopped at step %d after %.1f minutes", progress.step, progress.elapsed / 60)
    tune, test = cfg.decode.length_penalty == AUTO, not args.no_evaluate and "test" in data.splits
    if not (tune or test):
        return 0
    final = trainer.checkpoints.final(progress.best, cfg.train.average_last)  # best.pt, or the best k averaged
    tuning = None
    if tune:  # the penalty is chosen on the validation split and stored in the final checkpoint
        tuning = tune_and_store(from_loaded([load_model(final, device)], device, cfg.train.precision), final)
        write_json(tuning, cfg.run_dir / "length_penalty.json")
        log.info("length penalty chosen on the validation split: %g\n%s", tuning["best"], penalty_table(tuning))
    if not test:
        return 0
    translator = from_loaded([load_model(final, device)], device, cfg.train.precision)
    report, hyps = evaluate(translator, *split_pair(translator, "test"), "test", command_line)
    report["train"] = {"steps": progress.step, "minutes": round(progress.elapsed / 60, 2),
                       "parameters": trainer.n_params}
    if tuning is not None:
        report["length_penalty_tuning"] = {key: tuning[key] for key in TUNING_SUMMARY}
    write_report(report, hyps, cfg.run_dir / "eval_test.json", cfg.run_dir / "test.hyp.en")
    print(eval_summary(report))
    return 0


def _check_validation_lengths(split: Split, max_positions: int | None, rank: int) -> None:
    """Refuse a validation set the loss cannot read at all; say when it leaves out some pairs."""
    from nmt.train import pairs_within

    fits = len(pairs_within(split, max_positions))
    if not fits:
        raise ConfigError(f"model.max_positions ({max_positions}): every validation pair is longer, so no "
                          "validation loss can be computed; raise it (or shorten the validation set)")
    if fits < len(split) and rank == 0:
        log.warning("the validation loss leaves out %d of %d pairs longer than model.max_positions (%d); "
                    "BLEU translates them truncated", len(split) - fits, len(split), max_positions)


DECODE_FLAGS = ("beam", "length_penalty", "stop", "max_len_a", "max_len_b", "batch_tokens", "max_source_tokens")


def _flag(key: str) -> str:
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
    translator = load_translator(paths, _device(args.device), args.precision, changes, _flag)
    if translator.decode.length_penalty == AUTO and not getattr(args, "tune_length_penalty", False):
        print(f"warning: {paths[0]}: its length penalty is auto but was never tuned; decoding at {UNTUNED_PENALTY} "
              f"(choose one with nmt-evaluate {paths[0]} --split val --tune-length-penalty, or give --length-penalty)",
              file=sys.stderr)
    return translator


def _command_line(prog: str, argv: list[str] | None) -> str:
    return shlex.join([prog, *(sys.argv[1:] if argv is None else argv)])


def _evaluate_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="nmt-evaluate", description=evaluate_main.__doc__)
    parser.add_argument("models", nargs="*", metavar="MODEL", help="run folder, checkpoint file or export folder")
    parser.add_argument("-c", "--checkpoint", action="append", default=[], metavar="MODEL",
                        help="another model (repeatable): the models decode as an ensemble")
    parser.add_argument("--split", default="test", help="split of the run's dataset (default: test)")
    parser.add_argument("--src", help="source file to translate instead of a split")
    parser.add_argument("--ref", help="reference file for --src")
    parser.add_argument("--output", help="report path (default: <run>/eval_<split>.json, with --tune-length-penalty "
                                         "<run>/length_penalty.json); hypotheses go beside it")
    parser.add_argument("--tune-length-penalty", action="store_true",
                        help=f"with --split val: score the model at length penalties "
                             f"{', '.join(map(str, TUNED_PENALTIES))} and store the best in its checkpoint (a run "
                             "folder: its final one) or export manifest")
    add_decode_args(parser)
    return parser


@command
def evaluate_main(argv: list[str] | None = None) -> int:
    """nmt-evaluate RUN_OR_CHECKPOINT_OR_EXPORT...: translate a split (or --src/--ref files) and score it with
    sacrebleu. Several models (or -c MODEL, repeated) decode as an ensemble."""
    from nmt.evaluate import evaluate, split_pair, write_report
    from nmt.evaluate import summary as eval_summary

    parser = _evaluate_parser()
    args = parser.parse_args(argv)
    paths = args.models + args.checkpoint
    if not paths:
        parser.error("give at least one model (run folder, checkpoint file or export folder)")
    if bool(args.src) != bool(args.ref):
        raise ConfigError("--src and --ref go together")
    if args.tune_length_penalty:
        _check_tuning(args, paths)
    inputs = [item for path in paths for item in _checkpoint_inputs(path)]
    if args.src:
        inputs += [("--src", check_input("--src", args.src)), ("--ref", check_input("--ref", args.ref))]
    if args.output:
        check_output("--output", args.output, inputs)
    translator = translator_from_args(paths, args, n_best=1)
    if args.tune_length_penalty:
        return _tune(translator, paths[0], args.output, inputs, _command_line("nmt-evaluate", argv))
    if args.src:  # named apart from the splits, so that the run's own split reports stay as training wrote them
        name = f"file_{Path(args.src).stem}"
        sources, refs = read_pair(Path(args.src), Path(args.ref))
    else:
        name = args.split
        sources, refs = split_pair(translator, args.split)
    first = Path(translator.members[0].path)
    run_dir = first if first.is_dir() else first.parent.parent if first.parent.name == "checkpoints" else first.parent
    out = Path(args.output) if args.output else run_dir / f"eval_{name}.json"
    hyp_path = out.with_suffix(".hyp.txt") if args.output else run_dir / f"{name}.hyp.en"
    check_output("report", out, inputs)
    check_output("hypotheses", hyp_path, [*inputs, ("report", out)])
    report, hyps = evaluate(translator, sources, refs, name, _command_line("nmt-evaluate", argv))
    write_report(report, hyps, out, hyp_path)
    print(eval_summary(report))
    print(f"report: {out}")
    return 0


def _check_tuning(args: argparse.Namespace, paths: list[str]) -> None:
    """--tune-length-penalty chooses on the validation split, for one model, and chooses the penalty itself."""
    if args.split != "val" or args.src:
        raise ConfigError("--tune-length-penalty: the penalty is chosen on the validation split only; give "
                          "--split val (and no --src/--ref)")
    if len(paths) > 1:
        raise ConfigError("--tune-length-penalty: give one model (an ensemble takes its penalty from "
                          "--length-penalty)")
    if args.length_penalty is not None:
        raise ConfigError("--tune-length-penalty: it chooses the length penalty; leave out --length-penalty")


def _tune(translator: Translator, model: str, output: str | None, inputs: list[tuple[str, Path]],
          command_line: str) -> int:
    """nmt-evaluate --tune-length-penalty: validation BLEU at each penalty, the best stored with the model."""
    from nmt.evaluate import penalty_table, tune_and_store, write_json

    given = Path(model)
    folder = given if given.is_dir() else given.parent.parent if given.parent.name == "checkpoints" else given.parent
    out = Path(output) if output else folder / "length_penalty.json"
    check_output("report", out, inputs)
    tuning = tune_and_store(translator, model)
    write_json(tuning | {"command": command_line}, out)
    print(penalty_table(tuning))
    print(f"length penalty {tuning['best']:g} stored in {tuning['stored_in']}; report: {out}")
    return 0


def _read_lines(stream, name: str) -> Iterator[str]:
    """Lines of a binary stream as text, failing clearly on the first invalid UTF-8 line."""
    for number, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise DataError(f"{name}: line {number} is not valid UTF-8") from None


def _checkpoint_inputs(path: str) -> list[tuple[str, Path]]:
    """The files a command reads of a model: the checkpoint given, each one a run folder may resolve to, or
    an export folder's files."""
    given = Path(path)
    if is_export(given):  # the files the manifest lists (reports written into the folder are not inputs)
        return [("exported model", p) for p in export_files(given)] + [("export manifest", given / MANIFEST)]
    if given.is_dir():
        return [("checkpoint", given / "checkpoints" / name) for name in ("averaged.pt", "best.pt", "last.pt")]
    return [("checkpoint", given)]


@command
def translate_main(argv: list[str] | None = None) -> int:
    """nmt-translate: translate a file (or stdin) line by line, keeping line order and count."""
    from nmt.diagnostics import Thresholds
    from nmt.translate import Stream

    parser = Parser(prog="nmt-translate", description=translate_main.__doc__)
    parser.add_argument("--checkpoint", "-c", action="append", required=True, metavar="MODEL",
                        help="run folder, checkpoint file or export folder; repeat it to decode with an ensemble")
    parser.add_argument("-i", "--input", help="input file (default: stdin)")
    parser.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    parser.add_argument("--n-best", type=int, help="hypotheses per line (Moses n-best format if > 1)")
    parser.add_argument("--scores", action="store_true",
                        help="append the hypothesis score after a tab; in greedy and beam search alike it is the "
                             "summed log-probability (EOS included) divided by the GNMT length penalty "
                             "((5 + length) / 6) ** alpha, the score n-best lists are ranked by")
    parser.add_argument("--chunk-lines", type=number(AT_LEAST_ONE, integer=True), default=2000,
                        help="lines read and sorted at a time")
    parser.add_argument("--attention-plots", metavar="DIR", help="save cross-attention heatmaps (PNG) here")
    parser.add_argument("--plot-count", type=number(NON_NEGATIVE, integer=True), default=10,
                        help="sentences to plot with --attention-plots")
    parser.add_argument("--attention-stats", metavar="FILE",
                        help="write per-sentence cross-attention statistics and outlier flags (JSONL)")
    parser.add_argument("--focus-threshold", type=number(UNIT), default=0.9,
                        help="--attention-stats: a row whose largest weight exceeds this is over-focused")
    parser.add_argument("--uniform-threshold", type=number(UNIT), default=0.9,
                        help="--attention-stats: a row whose entropy exceeds this share of log(source length) "
                             "is near-uniform")
    parser.add_argument("--max-focused-share", type=number(UNIT), default=0.95,
                        help="--attention-stats: flag a sentence with more over-focused rows than this share")
    parser.add_argument("--max-uniform-share", type=number(UNIT), default=0.5,
                        help="--attention-stats: flag a sentence with more near-uniform rows than this share")
    add_decode_args(parser)
    args = parser.parse_args(argv)
    inputs = [item for path in args.checkpoint for item in _checkpoint_inputs(path)]
    if args.input:
        inputs.append(("-i/--input", check_input("-i/--input", args.input)))
    if args.output:
        check_output("-o/--output", args.output, inputs)
    if args.attention_stats:
        check_output("--attention-stats", args.attention_stats, [*inputs, ("-o/--output", args.output)])
    if args.attention_plots:
        check_output("--attention-plots", args.attention_plots,
                     [*inputs, ("-o/--output", args.output), ("--attention-stats", args.attention_stats)], folder=True)
    if not args.input and sys.stdin is None:
        raise DataError("<stdin>: standard input is closed; give -i/--input FILE")
    if not args.output and sys.stdout is None:
        raise FileError("<stdout>: standard output is closed; give -o/--output FILE")
    translator = translator_from_args(args.checkpoint, args, n_best=args.n_best)
    wants_attention = args.attention_stats or args.attention_plots
    if wants_attention and translator.engine.name != "pytorch":
        raise ExportError(f"{args.checkpoint[0]}: an exported model gives no attention weights; "
                          "--attention-stats and --attention-plots need a checkpoint")
    thresholds = Thresholds(args.focus_threshold, args.uniform_threshold, args.max_focused_share,
                            args.max_uniform_share)
    stream = Stream(translator, args.chunk_lines, args.scores, args.attention_plots, args.plot_count,
                    args.attention_stats, thresholds)
    name = args.input or "<stdin>"
    if args.input:
        try:
            source = open(args.input, "rb")  # noqa: SIM115 - closed below
        except OSError as err:
            raise DataError(f"{args.input}: cannot open input ({err.strerror})") from None
    else:
        source = sys.stdin.buffer
    try:
        stream.run(_read_lines(source, name), name, args.output)
    finally:
        if args.input:
            source.close()
    return 0


@command
def export_main(argv: list[str] | None = None) -> int:
    """nmt-export RUN_OR_CHECKPOINT: convert a Transformer for deployment with CTranslate2."""
    from nmt.export import FORMATS, QUANTIZATIONS, export_ctranslate2

    parser = Parser(prog="nmt-export", description=export_main.__doc__)
    parser.add_argument("checkpoint", help="run folder or checkpoint file")
    parser.add_argument("--format", default="ctranslate2", help=f"export format: {', '.join(FORMATS)}")
    parser.add_argument("--quantization", default="float32",
                        help=f"weight type: {', '.join(QUANTIZATIONS)} (float16 needs a CUDA machine)")
    parser.add_argument("--output", "-o", required=True, help="new folder for the exported model")
    args = parser.parse_args(argv)
    if args.format not in FORMATS:
        raise ExportError(f"--format {args.format}: unknown export format (known: {', '.join(FORMATS)})")
    check_output("--output", args.output, folder=True)
    manifest = export_ctranslate2(args.checkpoint, args.output, args.quantization)
    print(f"exported {manifest['source_checkpoint']} ({manifest['quantization']}) to {args.output}")
    return 0


@command
def average_main(argv: list[str] | None = None) -> int:
    """nmt-average: average the weights of several checkpoints (or a run's best k) into one checkpoint."""
    parser = Parser(prog="nmt-average", description=average_main.__doc__)
    parser.add_argument("inputs", nargs="+", help="checkpoint files, or one run folder with --best")
    parser.add_argument("--best", type=number(NON_NEGATIVE, integer=True), default=0,
                        help="with a run folder: average its best K checkpoints")
    parser.add_argument("-o", "--output", required=True, help="averaged checkpoint to write")
    args = parser.parse_args(argv)
    if args.best:
        run = Path(args.inputs[0])
        if len(args.inputs) != 1 or not run.is_dir():
            raise ConfigError(f"--best {args.best}: give exactly one run folder, got {' '.join(args.inputs)}")
        last = check_input("run's last checkpoint", run / "checkpoints" / "last.pt")
        best = load_bundle(last).progress.get("best", [])
        if args.best > len(best):
            raise ConfigError(f"--best {args.best}: {run} keeps {len(best)} best checkpoints (train.keep_best)")
        paths = [run / "checkpoints" / b["path"] for b in best[:args.best]]
        inputs = [("run's last checkpoint", last)]
    else:
        paths = [Path(p) for p in args.inputs]
        inputs = []
    inputs += [("input", check_input("input", p)) for p in paths]
    check_output("-o/--output", args.output, inputs)
    save_bundle(average_checkpoints(paths), args.output)
    print(f"averaged {len(paths)} checkpoints into {args.output}")
    return 0


@command
def compare_main(argv: list[str] | None = None) -> int:
    """nmt-compare RUN_DIR...: compare runs and write compare.md, compare.json and plots."""
    from nmt.compare import RUN_FILES, compare, markdown

    parser = Parser(prog="nmt-compare", description=compare_main.__doc__)
    parser.add_argument("runs", nargs="+", help="run folders (a missing or failed one is reported as such)")
    parser.add_argument("--baseline", action="append", default=[],
                        help="run the others of its family (rnn, transformer) are tested against; once per family "
                             "(default: the family's additive / full attention run, else its first usable run)")
    parser.add_argument("--suite", default="compare", help="suite name, used in the title and the default --out")
    parser.add_argument("--out", help="report folder (default: reports/<suite>)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--diag-sentences", type=number(AT_LEAST_ONE, integer=True), default=200,
                        help="test sentences for attention diagnostics")
    parser.add_argument("--heatmaps", type=number(NON_NEGATIVE, integer=True), default=3,
                        help="test sentences drawn as attention heatmaps")
    parser.add_argument("--resamples", type=number(Range(100.0), integer=True), default=1000,
                        help="paired bootstrap resamples")
    args = parser.parse_args(argv)
    _device(args.device)
    out = check_output("--out", Path(args.out) if args.out else Path("reports") / args.suite, folder=True)
    reads = [("run file", Path(run) / name) for run in args.runs for name in RUN_FILES]
    for name in ("compare.json", "compare.md", "learning_curves.png"):
        check_output("--out", out / name, reads)
    data = compare([Path(p) for p in args.runs], out, args.suite, args.baseline, args.device,
                   args.diag_sentences, args.heatmaps, args.resamples)
    print(markdown(data), end="")
    print(f"report: {out / 'compare.md'}")
    if not any(row["status"] == "ok" for row in data["runs"]):
        print("error: no run could be compared (each one's reason is in the report)", file=sys.stderr)
        return 1
    return 0


@command
def config_doc_main(argv: list[str] | None = None) -> int:
    """nmt-config-doc: print the configuration reference generated from the dataclasses."""
    Parser(prog="nmt-config-doc", description=config_doc_main.__doc__).parse_args(argv)
    print(reference_markdown())
    return 0
