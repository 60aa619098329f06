"""The console commands: parse the arguments, call the library, print one-line errors and set the exit status.

Everything a command does is a function of the library (nmt.api, nmt.run, nmt.evaluation, nmt.stream, ...);
this module owns what only a process should: logging set-up on stderr, the signal-exit policy, exit codes, and
the flags. The benchmarks and nmt-serve (nmt/serve/command.py) build their commands from the same pieces.
A command imports the modules that load torch once its arguments are parsed, so `import nmt.cli` and --help need
no torch.
"""

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

from nmt.config import (
    AUTO,
    STOP_RULES,
    TUNED_PENALTIES,
    UNTUNED_PENALTY,
    Config,
    Range,
    load_config,
    parse_overrides,
    reference_markdown,
    variant_reference,
)
from nmt.diagnostics import DIAG_SENTENCES, HEATMAPS, Thresholds
from nmt.errors import MESSAGE, ConfigError, ExportError, NmtError, TrainingInterrupted, excerpt, short_repr
from nmt.fileio import check_input, check_output, describe_os_error
from nmt.model_formats import EXPORT_FORMATS, HF_TOKENIZER_FILES, HF_WEIGHT_FILES, QUANTIZATIONS
from nmt.run.folder import RunDir
from nmt.signals import Interrupted, exit_status, terminate_cleanly

if TYPE_CHECKING:
    from nmt.translator import Translator

TRACEBACK_ENV = "NMT_TRACEBACK"  # set to 1 to see the traceback of an unexpected error
UNIT = Range(0.0, 1.0)
DECODE_FLAGS = ("beam", "length_penalty", "stop", "max_len_a", "max_len_b", "batch_tokens", "max_source_tokens",
                "sampling", "temperature", "top_k", "top_p", "seed")


def command(func: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Run a command, turning every error into one line on stderr and a non-zero exit status."""

    @functools.wraps(func)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            with terminate_cleanly():
                return func(argv)
        except TrainingInterrupted as err:
            _say(str(err))
            return exit_status(err.signum)
        except NmtError as err:
            _say(str(err))
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
            _say(describe_os_error(err))
        except Exception as err:  # noqa: BLE001 - the last line of defence: one line, never a traceback
            if _out_of_memory(err):
                print("error: out of memory on the device; lower train.batch_tokens (training) or --batch-tokens "
                      "(decoding)", file=sys.stderr)
                return 1
            if os.environ.get(TRACEBACK_ENV):
                raise
            if _peer_gone(err):
                print("error: another process of this torchrun job stopped, so this one cannot go on; its own "
                      "error line says why", file=sys.stderr)
                return 1
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            _say(f"unexpected {type(err).__name__}: {excerpt(first, MESSAGE)} (set {TRACEBACK_ENV}=1 to see where; "
                 "please report it)")
        return 1

    return wrapper


def _say(message: str) -> None:
    """Print an error line, cut to a marked excerpt when it echoes a long value (a path, a config string)."""
    print(f"error: {excerpt(message, MESSAGE)}", file=sys.stderr)


def _out_of_memory(err: Exception) -> bool:
    """Whether `err` is torch's out-of-memory error (torch is loaded once anything could run out of memory)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(err, torch.OutOfMemoryError)


def _peer_gone(err: Exception) -> bool:
    """Whether a collective failed because another rank's process ended (gloo and NCCL say it in their words)."""
    import torch.distributed as dist

    text = str(err)
    return (dist.is_available() and dist.is_initialized() and isinstance(err, RuntimeError)
            and (isinstance(err, dist.DistError) or "closed by peer" in text or "reset by peer" in text))


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (its usage block stays in --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {excerpt(message, MESSAGE)} (see {self.prog} --help)\n")


def number(bounds: Range, integer: bool = False) -> Callable[[str], float]:
    """An argparse type: a number within `bounds` (NaN and infinity never are)."""

    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            value = None
        if value is None or value not in bounds:
            raise argparse.ArgumentTypeError(f"got {short_repr(text)}, allowed: {bounds.describe(integer)}")
        return value

    return parse


def config_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A command's parser that takes a config file and --set overrides."""
    parser = Parser(prog=prog, description=doc)
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.lr=3e-4 (repeatable)")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    """The checked config of a `config_parser` command line: its file with the `--set` overrides applied."""
    return load_config(args.config, parse_overrides(args.overrides))


def setup_logging() -> None:
    """The process's log lines on stderr: torchrun's rank 0 (or a lone process) at INFO, the other ranks at
    WARNING. The library adds the run's train.log itself while a training runs."""
    rank = int(os.environ.get("RANK", "0") or 0)
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, handlers=[logging.StreamHandler()],
                        force=True, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    # A full disk must surface once, as the checkpoint's one-line error, not as a traceback per log line.
    logging.raiseExceptions = False


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
    group.add_argument("--max-source-tokens", type=int,
                       help="longer sources are truncated to this many subwords")
    group.add_argument("--sampling", action=argparse.BooleanOptionalAction,
                       help="draw each subword from the model's distribution instead of searching (with --beam 1), "
                            "e.g. for back-translation")
    group.add_argument("--temperature", type=float, help="sampling: log-probabilities are divided by it (> 0)")
    group.add_argument("--top-k", type=int, help="sampling: draw from the k most probable subwords only (0: all)")
    group.add_argument("--top-p", type=float,
                       help="sampling: draw from the smallest set of most probable subwords whose probabilities "
                            "reach p only (nucleus, in (0, 1]; 1: all)")
    group.add_argument("--seed", type=int, help="sampling: the same seed and input give the same output")
    group.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    group.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                       help="autocast precision of a checkpoint (bf16/fp16 mainly on CUDA); an export decodes at "
                            "the quantization it was exported with")


def add_threshold_args(parser: argparse.ArgumentParser, where: str, shares: bool = True) -> None:
    """The attention-diagnostics thresholds of `Thresholds`, for the output named `where` (--attention-stats,
    /attention); `shares` adds the per-sentence flags' shares."""
    parser.add_argument("--focus-threshold", type=number(UNIT), default=Thresholds.focused,
                        help=f"{where}: a row whose largest weight exceeds this is over-focused")
    parser.add_argument("--uniform-threshold", type=number(UNIT), default=Thresholds.uniform,
                        help=f"{where}: a row whose entropy exceeds this share of log(source length) is near-uniform")
    if shares:
        parser.add_argument("--max-focused-share", type=number(UNIT), default=Thresholds.max_focused_share,
                            help=f"{where}: flag a sentence with more over-focused rows than this share")
        parser.add_argument("--max-uniform-share", type=number(UNIT), default=Thresholds.max_uniform_share,
                            help=f"{where}: flag a sentence with more near-uniform rows than this share")


def translator_from_args(paths: list[str], args: argparse.Namespace, **extra: int | None) -> Translator:
    """The translator for the models on the command line, with the decoding flags applied and checked."""
    from nmt.loader import load_translator

    changes = {key: getattr(args, key) for key in DECODE_FLAGS} | extra
    translator = load_translator(paths, args.device, args.precision, changes, flag)
    if translator.decode.length_penalty == AUTO and not getattr(args, "tune_length_penalty", False):
        print(f"warning: {paths[0]}: its length penalty is auto but was never tuned; decoding at {UNTUNED_PENALTY} "
              f"(choose one with nmt-evaluate {paths[0]} --split val --tune-length-penalty, or give --length-penalty)",
              file=sys.stderr)
    return translator


@command
def prepare_main(argv: list[str] | None = None) -> int:
    """nmt-prepare CONFIG: read, clean, tokenize and cache the data; print what it did. With --task2 LANG
    --output FILE: write Multi30k task 2's LANG text instead, without validation and test sentences; with --task1
    LANG --output FILE, task 1's LANG training text, line for line."""
    parser = config_parser("nmt-prepare", prepare_main.__doc__)
    text = parser.add_mutually_exclusive_group()
    text.add_argument("--task2", choices=("en", "de"),
                      help="write the monolingual task 2 text of this language to --output (data.task2_mirror, "
                           "data.mirror for the held-out sets, data.lowercase as in the config)")
    text.add_argument("--task1", choices=("en", "de"),
                      help="write task 1's training text of this language to --output, every line in order "
                           "(data.mirror or the download), to pair with its translation")
    parser.add_argument("--output", help="with --task2 or --task1: the file to write (.gz: gzipped)")
    args = parser.parse_args(argv)
    if bool(args.task2 or args.task1) != bool(args.output):
        raise ConfigError("--output goes with --task2 or --task1, and each of them with --output")
    from nmt.data import prepare, summary, vocabulary_warning
    from nmt.run.lifecycle import check_data_paths

    cfg = config_from_args(args)
    if args.task2:
        from nmt.data.task2 import write_monolingual

        check_output("output", args.output)
        print(write_monolingual(cfg.data, args.task2, args.output).summary())
        return 0
    if args.task1:
        from nmt.data.task2 import write_task1_training

        check_output("output", args.output)
        lines = write_task1_training(cfg.data, args.task1, args.output)
        print(f"multi30k task 1 train {args.task1}: {len(lines)} lines written to {args.output}")
        return 0
    check_data_paths(cfg)
    data = prepare(cfg)
    print(summary(data))
    if advice := vocabulary_warning(data):
        print(f"warning: {advice}", file=sys.stderr)
    return 0


@command
def train_main(argv: list[str] | None = None) -> int:
    """nmt-train CONFIG: prepare (cached), train, then evaluate the best checkpoint on the test split."""
    parser = config_parser("nmt-train", train_main.__doc__)
    parser.add_argument("--restart", action="store_true",
                        help="start over, deleting the run's earlier checkpoints and metrics")
    parser.add_argument("--no-evaluate", action="store_true",
                        help="skip the final test-set evaluation (decode.length_penalty auto is still tuned on the "
                             "validation split)")
    args = parser.parse_args(argv)
    from nmt.evaluation import summary as eval_summary
    from nmt.run.lifecycle import train_run

    cfg = config_from_args(args)
    setup_logging()
    run = train_run(cfg, args.restart, not args.no_evaluate, command_line("nmt-train", argv))
    if run.report is not None:
        print(eval_summary(run.report))
    return 0


def evaluate_parser() -> argparse.ArgumentParser:
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
                             "folder: its final one) or export manifest; an ensemble's goes only in the --output "
                             "report")
    add_decode_args(parser)
    return parser


@command
def evaluate_main(argv: list[str] | None = None) -> int:
    """nmt-evaluate RUN_OR_CHECKPOINT_OR_EXPORT...: translate a split (or --src/--ref files) and score it with
    sacrebleu. Several models (or -c MODEL, repeated) decode as an ensemble."""
    parser = evaluate_parser()
    args = parser.parse_args(argv)
    from nmt.data import read_pair
    from nmt.evaluation import check_tuning, evaluate, report_paths, split_pair, tune_command, write_report
    from nmt.evaluation import summary as eval_summary
    from nmt.loader import model_inputs

    paths = args.models + args.checkpoint
    if not paths:
        parser.error("give at least one model (run folder, checkpoint file or export folder)")
    if bool(args.src) != bool(args.ref):
        raise ConfigError("--src and --ref go together")
    if args.tune_length_penalty:
        check_tuning(args.split, args.src, len(paths), args.length_penalty, args.output)
    inputs = [item for path in paths for item in model_inputs(path)]
    if args.src:
        inputs += [("--src", check_input("--src", args.src)), ("--ref", check_input("--ref", args.ref))]
    if args.output:
        check_output("--output", args.output, inputs)
    translator = translator_from_args(paths, args, n_best=1)
    if args.tune_length_penalty:
        print(tune_command(translator, paths[0], args.output, inputs, command_line("nmt-evaluate", argv)))
        return 0
    if args.src:  # named apart from the splits, so that the run's own split reports stay as training wrote them
        name = f"file_{Path(args.src).stem}"
        sources, refs = read_pair(Path(args.src), Path(args.ref))
    else:
        name = args.split
        sources, refs = split_pair(translator.cfg, args.split)
    out, hyp_path = report_paths(translator.members[0].path, name, args.output, translator.languages[1])
    check_output("report", out, inputs)
    check_output("hypotheses", hyp_path, [*inputs, ("report", out)])
    report, hyps = evaluate(translator, sources, refs, name, command_line("nmt-evaluate", argv))
    write_report(report, hyps, out, hyp_path)
    print(eval_summary(report))
    print(f"report: {out}")
    return 0


@command
def translate_main(argv: list[str] | None = None) -> int:
    """nmt-translate: translate a file (or stdin) line by line, keeping line order and count; or, with --format
    html or xml, translate the text of a marked-up document and keep its markup as written."""
    from nmt.markup import FORMATS
    from nmt.sentences import MODES

    parser = Parser(prog="nmt-translate", description=translate_main.__doc__)
    parser.add_argument("--checkpoint", "-c", action="append", required=True, metavar="MODEL",
                        help="run folder, checkpoint file or export folder; repeat it to decode with an ensemble")
    parser.add_argument("-i", "--input", help="input file (default: stdin)")
    parser.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    parser.add_argument("--n-best", type=int, help="hypotheses per line (Moses n-best format if > 1)")
    parser.add_argument("--scores", action="store_true",
                        help="append, tab-separated, the score, the per-token mean log-probability and the "
                             "confidence (its exp, in [0, 1]; not a quality estimate); the score is, in greedy and "
                             "beam search alike, the summed log-probability (EOS included) divided by the GNMT length "
                             "penalty ((5 + length) / 6) ** alpha, summed over a line's sentences, the score n-best "
                             "lists are ranked by")
    parser.add_argument("--format", choices=("text", *FORMATS), default="text",
                        help="text (default): one text per line; html or xml: the input is one document whose "
                             "markup, entities and line breaks are kept as written and whose text is translated, "
                             "inline tags placed by the cross-attention (text in code, pre and translate=\"no\" "
                             "elements left alone; docs/translating.md); a document that is not well-formed XML "
                             "under xml is an error")
    parser.add_argument("--ignore-tags", metavar="TAG[,TAG...]",
                        help="with --format html or xml: elements whose text is left untranslated, as DeepL's "
                             "ignore_tags")
    parser.add_argument("--split-sentences", choices=MODES,
                        help="on (the default for text): translate each sentence of a line on its own and join "
                             "them with the line's own whitespace; off: each line (each block of a document) whole, "
                             "as nmt-evaluate does; nonewlines (the default for html and xml, where a line break is "
                             "whitespace): as on, but a line break does not end a sentence")
    parser.add_argument("--chunk-lines", type=number(Range(1, 1_000_000), integer=True), default=2000,
                        help="lines read and sorted at a time")
    parser.add_argument("--attention-plots", metavar="DIR", help="save cross-attention heatmaps (PNG) here")
    parser.add_argument("--plot-count", type=number(Range(0, 10_000), integer=True), default=10,
                        help="sentences to plot with --attention-plots")
    parser.add_argument("--attention-stats", metavar="FILE",
                        help="write per-sentence cross-attention statistics and outlier flags (JSONL)")
    parser.add_argument("--glossary", metavar="FILE",
                        help="source term, tab, target term per line (DeepL's CSV entries if FILE ends in .csv): "
                             "where a source term occurs in a line, its translation must contain the target term "
                             "(docs/translating.md says how terms are matched)")
    parser.add_argument("--constraints", metavar="FILE",
                        help="one line per input line: the target terms its translation must contain, separated by "
                             "tabs (a blank line: none), as fairseq's --constraints reads them")
    add_threshold_args(parser, "--attention-stats")
    add_decode_args(parser)
    args = parser.parse_args(argv)
    if args.format == "text" and args.ignore_tags is not None:
        parser.error("--ignore-tags needs --format html or xml")
    if args.format != "text":
        given = [flag for flag, value in (("--n-best", (args.n_best or 1) > 1), ("--scores", args.scores),
                                          ("--attention-plots", args.attention_plots),
                                          ("--attention-stats", args.attention_stats),
                                          ("--glossary", args.glossary), ("--constraints", args.constraints))
                 if value]
        if given:
            parser.error(f"{', '.join(given)}: not with --format {args.format}, which writes one translated document")
    from nmt.glossary import load_glossary
    from nmt.stream import Stream, check_paths, translate_document_file, translate_file

    check_paths(args.checkpoint, args.input, args.output, args.attention_stats, args.attention_plots, args.glossary,
                args.constraints)
    glossary = load_glossary(args.glossary) if args.glossary else None
    translator = translator_from_args(args.checkpoint, args, n_best=args.n_best)
    if (args.attention_stats or args.attention_plots) and not translator.engine.abilities.attention:
        raise ExportError(f"{args.checkpoint[0]}: an exported model gives no attention weights; "
                          "--attention-stats and --attention-plots need a checkpoint")
    if args.format != "text":
        if not translator.engine.abilities.attention:
            print(f"warning: the {translator.engine.name} engine gives no attention: each inline tag goes to the "
                  "edges of its sentence", file=sys.stderr)
        ignore_tags = [tag.strip() for tag in (args.ignore_tags or "").split(",") if tag.strip()]
        translate_document_file(translator, args.format, args.input, args.output,
                                split_sentences=args.split_sentences or "nonewlines", ignore_tags=ignore_tags)
        return 0
    thresholds = Thresholds(args.focus_threshold, args.uniform_threshold, args.max_focused_share,
                            args.max_uniform_share)
    stream = Stream(translator, args.chunk_lines, args.scores, args.attention_plots, args.plot_count,
                    args.attention_stats, thresholds, args.split_sentences or "on", glossary)
    translate_file(stream, args.input, args.output, args.constraints)
    return 0


@command
def export_main(argv: list[str] | None = None) -> int:
    """nmt-export RUN_OR_CHECKPOINT: convert a Transformer for deployment with CTranslate2, or into a folder that
    Hugging Face transformers loads (--format huggingface)."""
    parser = Parser(prog="nmt-export", description=export_main.__doc__)
    parser.add_argument("checkpoint", help="run folder or checkpoint file")
    parser.add_argument("--format", default="ctranslate2", help=f"export format: {', '.join(EXPORT_FORMATS)}")
    parser.add_argument("--quantization",
                        help=f"ctranslate2 weight type: {', '.join(QUANTIZATIONS)} (default float32; float16 needs a "
                             "CUDA machine)")
    parser.add_argument("--output", "-o", required=True, help="new folder for the exported model")
    args = parser.parse_args(argv)
    if args.format not in EXPORT_FORMATS:
        raise ExportError(f"--format {args.format}: unknown export format (known: {', '.join(EXPORT_FORMATS)})")
    check_output("--output", args.output, folder=True)
    if args.format == "huggingface":
        from nmt.interop.hf_export import export_huggingface

        if args.quantization:
            raise ExportError("--quantization applies to --format ctranslate2 only (a Hugging Face export is float32)")
        manifest = export_huggingface(args.checkpoint, args.output)
        print(f"exported {manifest['source_checkpoint']} ({manifest['class']}) to {args.output}")
        return 0
    from nmt.export import export_ctranslate2

    manifest = export_ctranslate2(args.checkpoint, args.output, args.quantization or "float32")
    print(f"exported {manifest['source_checkpoint']} ({manifest['quantization']}) to {args.output}")
    return 0


@command
def import_main(argv: list[str] | None = None) -> int:
    """nmt-import HF_FOLDER: convert a local Marian/OPUS-MT model folder into an nmt checkpoint."""
    parser = Parser(prog="nmt-import", description=import_main.__doc__)
    parser.add_argument("folder", help=f"Hugging Face model folder: config.json, {' or '.join(HF_WEIGHT_FILES)}, "
                                       f"{', '.join(HF_TOKENIZER_FILES)}")
    parser.add_argument("--output", "-o", required=True, help="new checkpoint file")
    args = parser.parse_args(argv)
    from nmt.interop.hf_import import import_huggingface

    check_output("--output", args.output, [("folder", args.folder)])
    source = import_huggingface(args.folder, args.output)
    print(f"imported {args.folder} ({source['model_type']}) to {args.output}")
    return 0


@command
def average_main(argv: list[str] | None = None) -> int:
    """nmt-average: average the weights of several checkpoints (or a run's best k) into one checkpoint."""
    parser = Parser(prog="nmt-average", description=average_main.__doc__)
    parser.add_argument("inputs", nargs="+", help="checkpoint files, or one run folder with --best")
    parser.add_argument("--best", type=number(Range(0, 1000), integer=True), default=0,
                        help="with a run folder: average its best K checkpoints")
    parser.add_argument("-o", "--output", required=True, help="averaged checkpoint to write")
    args = parser.parse_args(argv)
    from nmt.checkpoint import average_checkpoints, load_contents, save_contents

    if args.best:
        run = Path(args.inputs[0])
        if len(args.inputs) != 1 or not run.is_dir():
            raise ConfigError(f"--best {args.best}: give exactly one run folder, got {' '.join(args.inputs)}")
        last = check_input("run's last checkpoint", RunDir(run).last)
        best = load_contents(last).progress.get("best", [])
        if args.best > len(best):
            raise ConfigError(f"--best {args.best}: {run} keeps {len(best)} best checkpoints (train.keep_best)")
        paths = [RunDir(run).checkpoint(b["path"]) for b in best[:args.best]]
        inputs = [("run's last checkpoint", last)]
    else:
        paths = [Path(p) for p in args.inputs]
        inputs = []
    inputs += [("input", check_input("input", p)) for p in paths]
    check_output("-o/--output", args.output, inputs)
    save_contents(average_checkpoints(paths), args.output)
    print(f"averaged {len(paths)} checkpoints into {args.output}")
    return 0


@command
def compare_main(argv: list[str] | None = None) -> int:
    """nmt-compare RUN_DIR...: compare runs and write compare.md, compare.json and plots."""
    parser = Parser(prog="nmt-compare", description=compare_main.__doc__)
    parser.add_argument("runs", nargs="+", help="run folders (a missing or failed one is reported as such)")
    parser.add_argument("--baseline", action="append", default=[],
                        help="run the others of its family (rnn, transformer) are tested against; once per family "
                             "(default: the family's additive / full attention run, else its first usable run)")
    parser.add_argument("--suite", default="compare", help="suite name, used in the title and the default --out")
    parser.add_argument("--out", help="report folder (default: reports/<suite>)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--diag-sentences", type=number(Range(1, 1_000_000), integer=True), default=DIAG_SENTENCES,
                        help="test sentences for attention diagnostics")
    parser.add_argument("--heatmaps", type=number(Range(0, 1000), integer=True), default=HEATMAPS,
                        help="test sentences drawn as attention heatmaps")
    parser.add_argument("--resamples", type=number(Range(100, 1_000_000), integer=True), default=1000,
                        help="paired bootstrap resamples")
    args = parser.parse_args(argv)
    from nmt.compare import compare, markdown, run_files
    from nmt.utils import resolve_device

    resolve_device(args.device)
    out = check_output("--out", Path(args.out) if args.out else Path("reports") / args.suite, folder=True)
    reads = [("run file", Path(run) / name) for run in args.runs for name in run_files(run)]
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
def plot_main(argv: list[str] | None = None) -> int:
    """nmt-plot RUN [RUN ...]: draw the learning curve of runs (training and validation loss, validation BLEU
    against updates) from their metrics.jsonl, several runs overlaid."""
    parser = Parser(prog="nmt-plot", description=plot_main.__doc__)
    parser.add_argument("runs", nargs="+", help="run folders (or a checkpoint inside one)")
    parser.add_argument("-o", "--output", help="PNG to write (default: the run's curve.png for one run, "
                                               "curves.png in this folder for several)")
    args = parser.parse_args(argv)
    from nmt.errors import DataError
    from nmt.plots import run_curves

    runs = [RunDir.of(run) for run in args.runs]
    inputs = [("run's metrics", check_input("run's metrics", run.metrics)) for run in runs]
    names = [run.name for run in runs]
    labels = names if len(set(names)) == len(names) else [str(run.path) for run in runs]
    curves = []
    for label, run in zip(labels, runs):
        records = run.read_metrics()
        if not records:
            raise DataError(f"{run.metrics}: holds no record yet (a run logs its first after train.log_every "
                            "updates or train.log_minutes)")
        curves.append((label, records))
    default = runs[0].curve if len(runs) == 1 else Path("curves.png")
    output = check_output("-o/--output", args.output or default, inputs)
    run_curves(curves, output)
    print(f"learning curve of {', '.join(labels)}: {output}")
    return 0


def config_reference() -> str:
    """docs/config.md: every key, from the dataclasses, then each attention variant's own settings."""
    return f"{reference_markdown()}\n{variant_reference()}"


@command
def config_doc_main(argv: list[str] | None = None) -> int:
    """nmt-config-doc: print the configuration reference generated from the dataclasses."""
    Parser(prog="nmt-config-doc", description=config_doc_main.__doc__).parse_args(argv)
    print(config_reference(), end="")
    return 0
