"""The data, tokenizer and train sections, and the whole experiment they make up with model and decode."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from nmt.config.decoding import DecodeConfig
from nmt.config.fields import AT_LEAST_ONE, FRACTION, NON_NEGATIVE, POSITIVE, Range, Section, setting
from nmt.config.model import ModelConfig


@dataclass
class DataConfig(Section):
    """Where the parallel text comes from and how it is cleaned and batched."""

    KEY: ClassVar[str] = "data"

    dataset: str = setting("sample", "Corpus: the embedded sample, Multi30k task 1, or your own files.",
                           ("sample", "multi30k", "files"))
    mirror: str = setting("", "Folder holding the Multi30k .gz files; replaces the download "
                              "(the NMT_DATA_MIRROR environment variable does the same).")
    download_dir: str = setting("data/downloads", "Where downloaded corpora are stored.")
    cache_dir: str = setting("data/cache", "Where encoded ids are cached, keyed by content hash.")
    train_src: str = setting("", "dataset=files: training source file (plain or .gz).")
    train_tgt: str = setting("", "dataset=files: training target file.")
    train_corpora: list[list[str]] = setting([], "dataset=files: more training corpora, each [source, target] "
                                                 "(plain or .gz) or [file.tsv] with source<TAB>target per line; "
                                                 "read after train_src/train_tgt.")
    val_src: str = setting("", "dataset=files: validation source file.")
    val_tgt: str = setting("", "dataset=files: validation target file.")
    test_src: str = setting("", "dataset=files: test source file.")
    test_tgt: str = setting("", "dataset=files: test target file.")
    max_tokens: int = setting(128, "Training pairs with a side longer than this many subwords are dropped.",
                              bounds=AT_LEAST_ONE)
    max_ratio: float = setting(3.0, "Training pairs whose subword length ratio exceeds this are dropped.",
                               bounds=AT_LEAST_ONE)
    ratio_min_len: int = setting(5, "The length-ratio filter only applies when the longer side has this many subwords.",
                                 bounds=NON_NEGATIVE)
    lowercase: bool = setting(False, "Lowercase all text before tokenization.")
    dedup: bool = setting(False, "Drop training pairs identical (after normalization) to an earlier pair; "
                                 "remembers 8-byte hashes, not text.")
    workers: int = setting(0, "Processes that normalize and encode the training text (0: the CPU cores available).",
                           bounds=NON_NEGATIVE)


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
                                           "(all pairs when there are fewer).", bounds=AT_LEAST_ONE)
    sample_seed: int = setting(1, "Seed of the tokenizer's training sample.", bounds=NON_NEGATIVE)


@dataclass
class TrainConfig(Section):
    """Optimisation, schedule, precision, validation and stopping."""

    KEY: ClassVar[str] = "train"

    seed: int = setting(1, "Seed for python, numpy, torch and the batch shuffler.", bounds=Range(0.0, 2.0**32 - 1))
    device: str = setting("auto", "Where to train.", ("auto", "cpu", "cuda"))
    threads: int = setting(0, "CPU threads for torch (0: leave torch's choice).", bounds=Range(0.0, 1024.0))
    batch_tokens: int = setting(4096, "Token budget per batch, padding included (max of both sides).",
                                bounds=AT_LEAST_ONE)
    accumulate: int = setting(1, "Batches whose gradients are summed before one update.", bounds=AT_LEAST_ONE)
    max_steps: int = setting(0, "Stop after this many updates (0: no limit).", bounds=NON_NEGATIVE)
    max_epochs: int = setting(0, "Stop after this many epochs (0: no limit).", bounds=NON_NEGATIVE)
    max_minutes: float = setting(0.0, "Stop after this much wall-clock training time (0: no limit).",
                                 bounds=NON_NEGATIVE)
    optimizer: str = setting("adam", "Optimizer.", ("adam", "adamw"))
    lr: float = setting(1e-3, "Peak learning rate (noam: the factor's base is d_model^-0.5 instead).", bounds=POSITIVE)
    betas: list[float] = setting([0.9, 0.98], "Adam betas.", bounds=FRACTION)
    eps: float = setting(1e-9, "Adam epsilon.", bounds=POSITIVE)
    weight_decay: float = setting(0.0, "Weight decay (never on biases, norms and embeddings).", bounds=NON_NEGATIVE)
    lr_multipliers: dict[str, float] = setting({}, "Learning-rate factors for parameters whose name contains the key.",
                                               bounds=NON_NEGATIVE)
    clip_norm: float = setting(1.0, "Gradient norm clipping (0: off).", bounds=NON_NEGATIVE)
    schedule: str = setting("inverse_sqrt", "Learning-rate schedule.",
                            ("noam", "inverse_sqrt", "constant", "plateau"))
    warmup: int = setting(4000, "Linear warmup steps.", bounds=NON_NEGATIVE)
    noam_factor: float = setting(1.0, "noam: scale factor.", bounds=POSITIVE)
    plateau_factor: float = setting(0.5, "plateau: rate multiplier when validation stalls.",
                                    bounds=Range(0.0, 1.0, low_open=True))
    plateau_patience: int = setting(2, "plateau: validations without improvement before decaying.", bounds=NON_NEGATIVE)
    min_lr: float = setting(1e-5, "plateau: lowest rate.", bounds=NON_NEGATIVE)
    label_smoothing: float = setting(0.1, "Label smoothing epsilon.", bounds=FRACTION)
    precision: str = setting("fp32", "Arithmetic precision.", ("fp32", "bf16", "fp16"))
    tf32: bool = setting(True, "On CUDA, let fp32 matrix products and convolutions use TF32 tensor cores (Ampere and "
                               "newer; inputs rounded to a 10-bit mantissa, sums in fp32): several times faster "
                               "in fp32 precision. No effect on the CPU or on bf16/fp16 products.")
    compile: bool = setting(False, "Wrap the model in torch.compile.")
    log_every: int = setting(50, "Updates between metrics.jsonl log lines.", bounds=AT_LEAST_ONE)
    tensorboard: bool = setting(False, "Also write the metrics.jsonl figures as TensorBoard scalars under "
                                       "<run>/tensorboard (needs the tensorboard package).")
    eval_every: int = setting(1000, "Updates between validations (0: once per epoch).", bounds=NON_NEGATIVE)
    eval_bleu: bool = setting(True, "Compute greedy validation BLEU at each validation.")
    early_stop_metric: str = setting("bleu", "Validation metric for early stopping and best checkpoints.",
                                     ("bleu", "loss"))
    patience: int = setting(0, "Validations without improvement before stopping (0: never).", bounds=NON_NEGATIVE)
    keep_best: int = setting(3, "Best checkpoints kept.", bounds=AT_LEAST_ONE)
    max_nonfinite: int = setting(10, "Consecutive skipped non-finite updates before the run stops.",
                                 bounds=AT_LEAST_ONE)
    average_last: int = setting(0, "Average this many best checkpoints for the final model, kept only when the "
                                   "average validates at least as well as best.pt (0: best only).",
                                bounds=NON_NEGATIVE)



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

    @property
    def run_dir(self) -> Path:
        return Path(self.run_root) / self.name
