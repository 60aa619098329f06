"""Console commands. Each turns bad input into one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from nmt.checkpoint import CheckpointError, average_checkpoints, load_bundle, save_bundle
from nmt.config import Config, ConfigError, DecodeConfig, load_config, reference_markdown
from nmt.data import DataError, prepare, read_pair, resolve_files, summary
from nmt.models import check_model_config
from nmt.tokenizer import TokenizerError
from nmt.train import TrainingError
from nmt.utils import resolve_device

USER_ERRORS = (ConfigError, DataError, CheckpointError, TokenizerError, TrainingError)
log = logging.getLogger("nmt")


def command(func: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Run a command, turning the errors a user can cause into one line and exit status 1."""

    @functools.wraps(func)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return func(argv)
        except USER_ERRORS as err:
            print(f"error: {err}", file=sys.stderr)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            return 1
        return 1

    return wrapper


def load(path: str, overrides: list[str]) -> Config:
    """Load and fully check a config (including model registry names) before any data is read."""
    cfg = load_config(path, overrides)
    try:
        check_model_config(cfg.model)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return cfg


def _config_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=doc)
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


def _device(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except ValueError as err:
        raise ConfigError(str(err)) from None


@command
def prepare_main(argv: list[str] | None = None) -> int:
    """nmt-prepare CONFIG: read, clean, tokenize and cache the data; print what it did."""
    args = _config_parser("nmt-prepare", prepare_main.__doc__).parse_args(argv)
    cfg = load(args.config, args.overrides)
    print(summary(prepare(cfg)))
    return 0


@command
def train_main(argv: list[str] | None = None) -> int:
    """nmt-train CONFIG: prepare (cached), train, then evaluate the best checkpoint on the test split."""
    from nmt.checkpoint import load_model
    from nmt.evaluate import evaluate, write_report
    from nmt.evaluate import summary as eval_summary
    from nmt.train import Trainer, init_distributed

    parser = _config_parser("nmt-train", train_main.__doc__)
    parser.add_argument("--restart", action="store_true", help="ignore an existing last checkpoint and start over")
    parser.add_argument("--no-evaluate", action="store_true", help="skip the final test-set evaluation")
    args = parser.parse_args(argv)
    cfg = load(args.config, args.overrides)
    device = init_distributed(cfg.train.device) or _device(cfg.train.device)
    trainer_rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    _setup_logging(cfg.run_dir, trainer_rank)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    data = prepare(cfg, log=log.info if trainer_rank == 0 else (lambda _msg: None))
    if trainer_rank == 0:
        log.info("\n%s", summary(data))
        data.tokenizer.save(cfg.run_dir / "tokenizer")
    trainer = Trainer(cfg, data, device)
    last = cfg.run_dir / "checkpoints" / "last.pt"
    if last.exists() and not args.restart:
        trainer.resume(last)
    progress = trainer.fit()
    if trainer_rank != 0:
        return 0
    log.info("training stopped at step %d after %.1f minutes", progress.step, progress.elapsed / 60)
    if args.no_evaluate or "test" not in data.splits:
        return 0
    loaded = load_model(trainer.final_checkpoint(), device)
    split = data.splits["test"]
    report, hyps = evaluate(loaded, split.src_raw, split.tgt_raw, cfg.decode, device, cfg.train.precision)
    report["train"] = {"steps": progress.step, "minutes": round(progress.elapsed / 60, 2),
                       "parameters": trainer.n_params}
    write_report(report, hyps, cfg.run_dir / "eval_test.json", cfg.run_dir / "test.hyp.en")
    print(eval_summary(report))
    return 0


def _decode_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=int, help="beam size (default: the run's decode.beam)")
    parser.add_argument("--length-penalty", type=float, help="GNMT alpha (default: the run's)")
    parser.add_argument("--batch-tokens", type=int, help="source tokens per decoding batch")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                        help="autocast precision for decoding (bf16/fp16 mainly on CUDA)")


def _decode_cfg(base: DecodeConfig, args: argparse.Namespace, n_best: int = 1) -> DecodeConfig:
    beam = args.beam if args.beam is not None else base.beam
    return DecodeConfig(beam=beam, length_penalty=base.length_penalty if args.length_penalty is None
                        else args.length_penalty, max_len_a=base.max_len_a, max_len_b=base.max_len_b,
                        batch_tokens=args.batch_tokens or base.batch_tokens, n_best=max(n_best, 1))


@command
def evaluate_main(argv: list[str] | None = None) -> int:
    """nmt-evaluate RUN_OR_CHECKPOINT: translate a split (or --src/--ref files) and score it with sacrebleu."""
    from nmt.checkpoint import load_model
    from nmt.evaluate import evaluate, write_report
    from nmt.evaluate import summary as eval_summary

    parser = argparse.ArgumentParser(prog="nmt-evaluate", description=evaluate_main.__doc__)
    parser.add_argument("checkpoint", help="run folder or checkpoint file")
    parser.add_argument("--split", default="test", help="split of the run's dataset (default: test)")
    parser.add_argument("--src", help="source file to translate instead of a split")
    parser.add_argument("--ref", help="reference file for --src")
    parser.add_argument("--output", help="report path (default: <run>/eval_<split>.json); hypotheses go beside it")
    _decode_args(parser)
    args = parser.parse_args(argv)
    if bool(args.src) != bool(args.ref):
        raise ConfigError("--src and --ref go together")
    device = _device(args.device)
    loaded = load_model(args.checkpoint, device)
    if args.src:
        sources, refs = read_pair(Path(args.src), Path(args.ref))
        name = Path(args.src).stem
    else:
        files = resolve_files(loaded.cfg)
        if args.split not in files:
            raise ConfigError(f"--split {args.split}: the run's dataset has splits {', '.join(files)}")
        sources, refs = read_pair(*files[args.split])
        name = args.split
    decode_cfg = _decode_cfg(loaded.cfg.decode, args)
    report, hyps = evaluate(loaded, sources, refs, decode_cfg, device, args.precision, split=name)
    run_dir = loaded.path.parent.parent
    out = Path(args.output) if args.output else run_dir / f"eval_{name}.json"
    hyp_path = out.with_suffix(".hyp.txt") if args.output else run_dir / f"{name}.hyp.en"
    write_report(report, hyps, out, hyp_path)
    print(eval_summary(report))
    print(f"report: {out}")
    return 0


def _read_lines(stream, name: str) -> Iterator[str]:
    """Lines of a binary stream as text, failing clearly on the first invalid UTF-8 line."""
    for number, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise DataError(f"{name}: line {number} is not valid UTF-8") from None


def _check_thresholds(args: argparse.Namespace) -> None:
    for flag in ("focus_threshold", "uniform_threshold", "max_focused_share", "max_uniform_share"):
        value = getattr(args, flag)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"--{flag.replace('_', '-')} must lie between 0 and 1, got {value}")


@command
def translate_main(argv: list[str] | None = None) -> int:
    """nmt-translate: translate a file (or stdin) line by line, keeping line order and count."""
    from nmt.translate import Translator

    parser = argparse.ArgumentParser(prog="nmt-translate", description=translate_main.__doc__)
    parser.add_argument("--checkpoint", "-c", required=True, help="run folder or checkpoint file")
    parser.add_argument("-i", "--input", help="input file (default: stdin)")
    parser.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    parser.add_argument("--n-best", type=int, default=1, help="hypotheses per line (Moses n-best format if > 1)")
    parser.add_argument("--scores", action="store_true", help="append the hypothesis score after a tab")
    parser.add_argument("--max-tokens", type=int, default=250, help="longer inputs are truncated (with a warning)")
    parser.add_argument("--chunk-lines", type=int, default=2000, help="lines read and sorted at a time")
    parser.add_argument("--attention-plots", metavar="DIR", help="save cross-attention heatmaps (PNG) here")
    parser.add_argument("--plot-count", type=int, default=10, help="sentences to plot with --attention-plots")
    parser.add_argument("--attention-stats", metavar="FILE",
                        help="write per-sentence cross-attention statistics and outlier flags (JSONL)")
    parser.add_argument("--focus-threshold", type=float, default=0.9,
                        help="--attention-stats: a row whose largest weight exceeds this is over-focused")
    parser.add_argument("--uniform-threshold", type=float, default=0.9,
                        help="--attention-stats: a row whose entropy exceeds this share of log(source length) "
                             "is near-uniform")
    parser.add_argument("--max-focused-share", type=float, default=0.95,
                        help="--attention-stats: flag a sentence with more over-focused rows than this share")
    parser.add_argument("--max-uniform-share", type=float, default=0.5,
                        help="--attention-stats: flag a sentence with more near-uniform rows than this share")
    _decode_args(parser)
    args = parser.parse_args(argv)
    _check_thresholds(args)
    device = _device(args.device)
    translator = Translator.from_checkpoint(args.checkpoint, device, args, _decode_cfg)
    name = args.input or "<stdin>"
    if args.input:
        try:
            source = open(args.input, "rb")  # noqa: SIM115 - closed below
        except OSError as err:
            raise DataError(f"{args.input}: cannot open input ({err.strerror})") from None
    else:
        source = sys.stdin.buffer
    try:
        translator.run(_read_lines(source, name), name, args.output)
    finally:
        if args.input:
            source.close()
    return 0


@command
def average_main(argv: list[str] | None = None) -> int:
    """nmt-average: average the weights of several checkpoints (or a run's best k) into one checkpoint."""
    parser = argparse.ArgumentParser(prog="nmt-average", description=average_main.__doc__)
    parser.add_argument("inputs", nargs="+", help="checkpoint files, or one run folder with --best")
    parser.add_argument("--best", type=int, default=0, help="with a run folder: average its best K checkpoints")
    parser.add_argument("-o", "--output", required=True, help="averaged checkpoint to write")
    args = parser.parse_args(argv)
    if args.best:
        run = Path(args.inputs[0])
        last = load_bundle(run / "checkpoints" / "last.pt")
        paths = [run / "checkpoints" / b["path"] for b in last.progress.get("best", [])[:args.best]]
    else:
        paths = [Path(p) for p in args.inputs]
    save_bundle(average_checkpoints(paths), args.output)
    print(f"averaged {len(paths)} checkpoints into {args.output}")
    return 0


@command
def compare_main(argv: list[str] | None = None) -> int:
    """nmt-compare RUN_DIR...: compare evaluation reports of several runs."""
    from nmt.compare import main

    return main(argv)


@command
def config_doc_main(argv: list[str] | None = None) -> int:
    """nmt-config-doc: print the configuration reference generated from the dataclasses."""
    argparse.ArgumentParser(prog="nmt-config-doc", description=config_doc_main.__doc__).parse_args(argv)
    print(reference_markdown())
    return 0
