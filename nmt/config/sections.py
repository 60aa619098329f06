"""The data, tokenizer and train sections, the whole experiment they make up with model and decode, and the
checks of a whole config that need more than one key (run whenever a Config is built, before any data is read)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from nmt.config.decoding import DecodeConfig, check_decode
from nmt.config.fields import FRACTION, Range, Section, setting
from nmt.config.model import ModelConfig, check_model
from nmt.config.variants import check_attention
from nmt.errors import ConfigError, short_repr

SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # the sentencepiece names of the special ids
_TAG_RE = re.compile(r"<[A-Za-z0-9_.-]{1,30}>")
_DIRECTION_RE = re.compile(r"([a-z]{2,3})-([a-z]{2,3})")
BILINGUAL = {"sample": ("de", "en"), "multi30k": ("de", "en")}  # the languages of each named dataset's pairs


@dataclass
class CorpusConfig:
    """One more training corpus: its files, how often an epoch sees it, and the tag marking its source side."""

    files: list[str] = setting([], "[source, target] (plain or .gz) or [file.tsv] with source<TAB>target per line, "
                                   "the source in the model's language (data.direction).")
    weight: float = setting(1.0, "How many times an epoch sees each of its pairs (above 0; 2.5: twice, and every "
                                 "other pair a third time; 0.5: every other pair).")
    tag: str = setting("", "A reserved symbol such as <bt> put before each of its source sentences (tagged "
                           "back-translation); the tokenizer reserves it, the search never emits it (empty: none).")


@dataclass
class DataConfig(Section):
    """Where the parallel text comes from and how it is cleaned and batched."""

    KEY: ClassVar[str] = "data"

    dataset: str = setting("sample", "Corpus: the embedded sample, Multi30k task 1, or your own files.",
                           ("sample", "multi30k", "files"))
    direction: str = setting("de-en", "Source and target language codes, source first: the sample and Multi30k "
                                      "train either way (de-en or en-de), every split reversed alike; with your own "
                                      "files it names their languages (sentence splitting, exports, file names).")
    mirror: str = setting("", "Folder holding the Multi30k .gz files; replaces the download "
                              "(the NMT_DATA_MIRROR environment variable does the same).")
    task2_mirror: str = setting("", "Folder holding Multi30k task 2's train.{1..5}.{en,de}.gz; replaces their "
                                    "download (the NMT_TASK2_MIRROR environment variable does the same).")
    download_dir: str = setting("data/downloads", "Where downloaded corpora are stored.")
    cache_dir: str = setting("data/cache", "Where encoded ids are cached, keyed by content hash.")
    train_src: str = setting("", "dataset=files: training source file (plain or .gz).")
    train_tgt: str = setting("", "dataset=files: training target file.")
    train_corpora: list[list[str] | CorpusConfig] = setting(
        [], "More training corpora, read after the dataset's own (any dataset): each [source, target] (plain or .gz), "
            "[file.tsv] with source<TAB>target per line, or {files: [...], weight: 1.0, tag: ''} to repeat it or "
            "mark its source side. Validation and test stay the dataset's.")
    val_src: str = setting("", "dataset=files: validation source file.")
    val_tgt: str = setting("", "dataset=files: validation target file.")
    test_src: str = setting("", "dataset=files: test source file.")
    test_tgt: str = setting("", "dataset=files: test target file.")
    max_tokens: int = setting(128, "Training pairs with a side longer than this many subwords are dropped.",
                              bounds=Range(1, 100_000))
    max_ratio: float = setting(3.0, "Training pairs whose subword length ratio exceeds this are dropped.",
                               bounds=Range(1, 1000))
    ratio_min_len: int = setting(5, "The length-ratio filter only applies when the longer side has this many subwords.",
                                 bounds=Range(0, 100_000))
    lowercase: bool = setting(False, "Lowercase all text before tokenization.")
    dedup: bool = setting(False, "Drop training pairs identical (after normalization) to an earlier pair; "
                                 "remembers 8-byte hashes, not text.")
    workers: int = setting(0, "Processes that normalize and encode the training text (0: the CPU cores available).",
                           bounds=Range(0, 1024))

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language codes of `direction`."""
        match = _DIRECTION_RE.fullmatch(self.direction)
        if match is None:
            raise ConfigError(f"data.direction: {short_repr(self.direction)} is not two language codes, source "
                              "first (de-en, en-de, ...)")
        return match[1], match[2]

    @property
    def corpora(self) -> list[CorpusConfig]:
        """data.train_corpora, each entry as a CorpusConfig."""
        return [entry if isinstance(entry, CorpusConfig) else CorpusConfig(list(entry)) for entry in self.train_corpora]

    @property
    def tags(self) -> list[str]:
        """The distinct source tags of the training corpora, sorted."""
        return sorted({entry.tag for entry in self.corpora if entry.tag})


@dataclass
class TokenizerConfig(Section):
    """Sentencepiece subword model."""

    KEY: ClassVar[str] = "tokenizer"

    type: str = setting("unigram", "Sentencepiece model type.", ("unigram", "bpe"))
    vocab_size: int = setting(8000, "Vocabulary size (per side when not joint).", bounds=Range(4.0, 1_000_000.0))
    joint: bool = setting(True, "One vocabulary shared by source and target.")
    character_coverage: float = setting(1.0, "Share of characters covered by the model (sentencepiece "
                                             "accepts 0.98 to 1).", bounds=Range(0.98, 1.0))
    hard_vocab_limit: bool = setting(False, "Fail instead of shrinking when the corpus is too small for vocab_size.")
    sample_pairs: int = setting(1_000_000, "Train sentencepiece on a random sample of this many training pairs "
                                           "(all pairs when there are fewer).", bounds=Range(1, 1e9))
    sample_seed: int = setting(1, "Seed of the tokenizer's training sample.", bounds=Range(0, 2**32 - 1))


@dataclass
class TrainConfig(Section):
    """Optimisation, schedule, precision, validation and stopping."""

    KEY: ClassVar[str] = "train"

    init_from: str = setting("", "Fine-tune: start from this run folder (its final model) or checkpoint, with its "
                                 "weights, tokenizer and model settings, and a fresh optimizer, schedule, step count "
                                 "and early-stopping state (empty: train from scratch).")
    seed: int = setting(1, "Seed for python, numpy, torch and the batch shuffler.", bounds=Range(0.0, 2.0**32 - 1))
    device: str = setting("auto", "Where to train.", ("auto", "cpu", "cuda"))
    threads: int = setting(0, "CPU threads for torch (0: leave torch's choice).", bounds=Range(0.0, 1024.0))
    batch_tokens: int = setting(4096, "Token budget per batch, padding included (max of both sides).",
                                bounds=Range(1, 1e8))
    accumulate: int = setting(1, "Batches whose gradients are summed before one update.", bounds=Range(1, 100_000))
    max_steps: int = setting(0, "Stop after this many updates (0: no limit).", bounds=Range(0, 1e9))
    max_epochs: int = setting(10, "Stop after this many epochs (0: no limit); whichever of max_steps, max_epochs and "
                                  "max_minutes comes first ends the run.", bounds=Range(0, 1_000_000))
    max_minutes: float = setting(0.0, "Stop after this much wall-clock training time (0: no limit).",
                                 bounds=Range(0, 1e7))
    optimizer: str = setting("adam", "Optimizer.", ("adam", "adamw"))
    lr: float = setting(1e-3, "Peak learning rate (noam: the factor's base is d_model^-0.5 instead).",
                        bounds=Range(0, 10, low_open=True))
    betas: list[float] = setting([0.9, 0.98], "Adam betas.", bounds=FRACTION)
    eps: float = setting(1e-9, "Adam epsilon.", bounds=Range(0, 1, low_open=True))
    weight_decay: float = setting(0.0, "Weight decay (never on biases, norms and embeddings).", bounds=Range(0, 10))
    lr_multipliers: dict[str, float] = setting({}, "Learning-rate factors for parameters whose name contains the key.",
                                               bounds=Range(0, 1000))
    clip_norm: float = setting(1.0, "Gradient norm clipping (0: off).", bounds=Range(0, 1e6))
    schedule: str = setting("inverse_sqrt", "Learning-rate schedule.",
                            ("noam", "inverse_sqrt", "constant", "plateau"))
    warmup: int = setting(4000, "Linear warmup steps.", bounds=Range(0, 1e9))
    noam_factor: float = setting(1.0, "noam: scale factor.", bounds=Range(0, 1000, low_open=True))
    plateau_factor: float = setting(0.5, "plateau: rate multiplier when validation stalls.",
                                    bounds=Range(0.0, 1.0, low_open=True))
    plateau_patience: int = setting(2, "plateau: validations without improvement before decaying.",
                                    bounds=Range(0, 1_000_000))
    min_lr: float = setting(1e-5, "plateau: lowest rate.", bounds=Range(0, 10))
    label_smoothing: float = setting(0.1, "Label smoothing epsilon.", bounds=FRACTION)
    precision: str = setting("fp32", "Arithmetic precision.", ("fp32", "bf16", "fp16"))
    tf32: bool = setting(True, "On CUDA, let fp32 matrix products and convolutions use TF32 tensor cores (Ampere and "
                               "newer; inputs rounded to a 10-bit mantissa, sums in fp32): several times faster "
                               "in fp32 precision. No effect on the CPU or on bf16/fp16 products.")
    compile: bool = setting(False, "Wrap the model in torch.compile.")
    log_every: int = setting(50, "Updates between training log lines (in train.log, on stderr and in metrics.jsonl).",
                             bounds=Range(1, 1e9))
    log_minutes: float = setting(1.0, "Also a training log line when this many minutes passed since the last one "
                                      "(0: only log_every), so a slow run says how it goes from its first minute.",
                                 bounds=Range(0, 1e7))
    save_every: int = setting(0, "Also write last.pt every this many updates, without validating (0: only the "
                                 "time cadence of save_minutes).", bounds=Range(0, 1e9))
    save_minutes: float = setting(5.0, "Also write last.pt when this many minutes of training passed since the last "
                                       "checkpoint, without validating (0: off): a crash loses at most this much.",
                                  bounds=Range(0, 1e7))
    tensorboard: bool = setting(False, "Also write the metrics.jsonl figures as TensorBoard scalars under "
                                       "<run>/tensorboard (needs the tensorboard package).")
    eval_every: int = setting(1000, "Updates between validations (0: once per epoch).", bounds=Range(0, 1e9))
    eval_bleu: bool = setting(True, "Compute greedy validation BLEU at each validation.")
    examples: int = setting(3, "Validation sentences (the same ones each time) translated at each validation and "
                               "shown with their references in the log, metrics.jsonl and TensorBoard (0: none).",
                            bounds=Range(0, 1000))
    early_stop_metric: str = setting("bleu", "Validation metric for early stopping and best checkpoints.",
                                     ("bleu", "loss"))
    patience: int = setting(0, "Validations without improvement before stopping (0: never).",
                            bounds=Range(0, 1_000_000))
    keep_best: int = setting(3, "Best checkpoints kept.", bounds=Range(1, 1000))
    max_nonfinite: int = setting(10, "Consecutive skipped non-finite updates before the run stops.",
                                 bounds=Range(1, 1_000_000))
    average_last: int = setting(0, "Average this many best checkpoints for the final model, kept only when the "
                                   "average validates at least as well as best.pt (0: best only).",
                                bounds=Range(0, 1000))


@dataclass
class Config:
    """A whole experiment."""

    name: str = setting("experiment", "Experiment name: the run folder is <run_root>/<name>.")
    run_root: str = setting("runs", "Folder holding run folders.")
    data: DataConfig = field(default_factory=DataConfig, metadata={"doc": "Data section."})
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig, metadata={"doc": "Tokenizer section."})
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"doc": "Model section."})
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc": "Training section."})
    decode: DecodeConfig = field(default_factory=DecodeConfig, metadata={"doc": "Decoding section."})

    def __post_init__(self) -> None:
        validate(self)

    @property
    def run_dir(self) -> Path:
        return Path(self.run_root) / self.name


# ---------------------------------------------------------------------------------------------- checks

FILES_KEYS = ("train_src", "train_tgt", "val_src", "val_tgt", "test_src", "test_tgt")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")  # a folder name, well within the 255 bytes of one


def validate(cfg: Config) -> None:
    """Cross-field checks that need more than one key."""
    if not _NAME_RE.fullmatch(cfg.name):
        raise ConfigError(f"name: {short_repr(cfg.name)} must be 1 to 200 letters, digits, '_', '-' or '.', not "
                          "starting with a dot (it names a folder under run_root)")
    check_model(cfg.model, cfg.data.max_tokens, cfg.tokenizer.joint)
    check_attention(cfg.model)
    check_decode(cfg.decode)
    tr = cfg.train
    if len(tr.betas) != 2:
        raise ConfigError("train.betas: expected two numbers")
    if tr.schedule in ("noam", "inverse_sqrt") and tr.warmup <= 0:
        raise ConfigError(f"train.warmup: schedule '{tr.schedule}' needs a positive warmup")
    if tr.max_steps <= 0 and tr.max_epochs <= 0 and tr.max_minutes <= 0:
        raise ConfigError("train: set at least one of max_steps, max_epochs, max_minutes")
    _validate_data(cfg.data)


PATH_KEYS = ("mirror", "task2_mirror", "download_dir", "cache_dir", *FILES_KEYS)  # the data section's paths


def absolute_paths(cfg: Config) -> Config:
    """`cfg` with every relative path (run_root, the data section's files and folders, train.init_from) made
    absolute against the working directory: what a run stores, so that its config and checkpoints find their
    data from any folder."""
    def absolute(path: str) -> str:
        return os.path.abspath(path) if path else path

    corpora = [replace(entry, files=[absolute(path) for path in entry.files]) if isinstance(entry, CorpusConfig)
               else [absolute(path) for path in entry] for entry in cfg.data.train_corpora]
    data = replace(cfg.data, **{key: absolute(getattr(cfg.data, key)) for key in PATH_KEYS}, train_corpora=corpora)
    return replace(cfg, run_root=absolute(cfg.run_root), data=data,
                   train=replace(cfg.train, init_from=absolute(cfg.train.init_from)))


def validate_new_run(cfg: Config) -> None:
    """Checks for a config a run starts from, not applied to the configs stored in earlier checkpoints (which
    load as they were written): settings that would be ignored or cut short."""
    tr, data = cfg.train, cfg.data
    if tr.average_last > tr.keep_best:
        raise ConfigError(f"train.average_last ({tr.average_last}) cannot exceed train.keep_best ({tr.keep_best}): "
                          "only the best keep_best checkpoints are kept to average")
    if data.dataset != "files":
        for key in FILES_KEYS:
            if getattr(data, key):
                raise ConfigError(f"data.{key}: only read when data.dataset is 'files', "
                                  f"not '{data.dataset}' (remove it or set data.dataset: files)")


def _validate_data(data: DataConfig) -> None:
    """Where the training text comes from: old keys, several corpora, or both."""
    src, tgt = data.languages
    if src == tgt:
        raise ConfigError(f"data.direction: {data.direction} translates a language into itself")
    if data.dataset in BILINGUAL and {src, tgt} != set(BILINGUAL[data.dataset]):
        pair = BILINGUAL[data.dataset]
        raise ConfigError(f"data.direction: dataset '{data.dataset}' holds {pair[0]} and {pair[1]}: choose "
                          f"{pair[0]}-{pair[1]} or {pair[1]}-{pair[0]}, not {data.direction}")
    for i, entry in enumerate(data.train_corpora):
        if not isinstance(entry, (list, CorpusConfig)):
            raise ConfigError(f"data.train_corpora[{i}]: expected a list of files or a CorpusConfig, got "
                              f"{type(entry).__name__} (load_config reads a mapping as one)")
    for i, entry in enumerate(data.corpora):
        where = f"data.train_corpora[{i}]"
        if len(entry.files) not in (1, 2) or not all(entry.files):
            raise ConfigError(f"{where}: expected [source, target] or [file.tsv], got {short_repr(entry.files)}")
        if not entry.weight > 0 or entry.weight > 1e6:
            raise ConfigError(f"{where}.weight: {short_repr(entry.weight)} must be above 0 (and at most 1e6)")
        if entry.tag and (not _TAG_RE.fullmatch(entry.tag) or entry.tag in SPECIAL_PIECES):
            raise ConfigError(f"{where}.tag: {short_repr(entry.tag)} must be a reserved symbol such as <bt>: "
                              "'<', 1 to 30 letters, digits, '_', '.' or '-', and '>', none of "
                              f"{', '.join(SPECIAL_PIECES)}")
    if data.dataset == "files":
        if bool(data.train_src) != bool(data.train_tgt) or not (data.train_src or data.train_corpora):
            key = "train_tgt" if data.train_src else "train_src"
            raise ConfigError(f"data.{key}: required when data.dataset is 'files' (or list data.train_corpora)")
        for key in ("val_src", "val_tgt"):
            if not getattr(data, key):
                raise ConfigError(f"data.{key}: required when data.dataset is 'files'")
