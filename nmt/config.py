"""Typed configuration: one dataclass per YAML section, validated before any data is read."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from nmt.fileio import atomic_output, cause
from nmt.yamlsafe import short_repr, strict_yaml


class ConfigError(ValueError):
    """A configuration problem, with the key and file at fault in its message."""




@dataclass(frozen=True)
class Range:
    """The interval a number setting may take. NaN and infinity never lie inside."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        try:
            if not math.isfinite(value):
                return False
        except OverflowError:  # an integer beyond any float: outside every range
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    @staticmethod
    def _num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    def describe(self, integer: bool = False) -> str:
        """What is allowed, in words: 'a finite number > 0', 'an integer >= 1', 'a number in [0, 1)'."""
        kind = "an integer" if integer else "a finite number"
        if math.isinf(self.high):
            return f"{kind} {'>' if self.low_open else '>='} {self._num(self.low)}"
        if math.isinf(self.low):
            return f"{kind} {'<' if self.high_open else '<='} {self._num(self.high)}"
        opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
        interval = f"{opening}{self._num(self.low)}, {self._num(self.high)}{closing}"
        return f"{'an integer' if integer else 'a number'} in {interval}"

    def check(self, value: float, name: str) -> None:
        """Raise ConfigError naming `name`, the value and what is allowed, when `value` lies outside."""
        if value not in self:
            raise ConfigError(f"{name}: got {value!r}, allowed: {self.describe(isinstance(value, int))}")


POSITIVE = Range(0.0, low_open=True)
NON_NEGATIVE = Range(0.0)
AT_LEAST_ONE = Range(1.0)
FRACTION = Range(0.0, 1.0, high_open=True)  # shares that must leave something: dropout, smoothing, betas


def _opt(default: Any, doc: str, choices: tuple[str, ...] | None = None, bounds: Range | None = None) -> Any:
    """A field with its single default, its documentation and, optionally, its valid choices or range."""
    meta = {"doc": doc, "choices": choices, "bounds": bounds}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def _numbers(value: Any, name: str) -> list[tuple[str, Any]]:
    """(name, number) for a number, or for each number inside a list or mapping."""
    if isinstance(value, list):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(f"{name}.{k}", v) for k, v in value.items()]
    return [(name, value)]


def check_ranges(section: Any, where: str) -> None:
    """Check every number of a config section against the range its field declares."""
    for f in dataclasses.fields(section):
        bounds = f.metadata.get("bounds")
        if bounds is None:
            continue
        for name, value in _numbers(getattr(section, f.name), f"{where}.{f.name}" if where else f.name):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                bounds.check(value, name)


class _Section:
    """Base of the config sections: numbers are range-checked whenever a section is built, in code or from YAML."""

    KEY: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_ranges(self, self.KEY)


@dataclass
class DataConfig(_Section):
    """Where the parallel text comes from and how it is cleaned and batched."""

    KEY: ClassVar[str] = "data"

    dataset: str = _opt("sample", "Corpus: the embedded sample, Multi30k task 1, or your own files.",
                        ("sample", "multi30k", "files"))
    mirror: str = _opt("", "Folder holding the Multi30k .gz files; replaces the download "
                           "(the NMT_DATA_MIRROR environment variable does the same).")
    download_dir: str = _opt("data/downloads", "Where downloaded corpora are stored.")
    cache_dir: str = _opt("data/cache", "Where encoded ids are cached, keyed by content hash.")
    train_src: str = _opt("", "dataset=files: training source file (plain or .gz).")
    train_tgt: str = _opt("", "dataset=files: training target file.")
    train_corpora: list[list[str]] = _opt([], "dataset=files: more training corpora, each [source, target] "
                                              "(plain or .gz) or [file.tsv] with source<TAB>target per line; "
                                              "read after train_src/train_tgt.")
    val_src: str = _opt("", "dataset=files: validation source file.")
    val_tgt: str = _opt("", "dataset=files: validation target file.")
    test_src: str = _opt("", "dataset=files: test source file.")
    test_tgt: str = _opt("", "dataset=files: test target file.")
    max_tokens: int = _opt(128, "Training pairs with a side longer than this many subwords are dropped.",
                           bounds=AT_LEAST_ONE)
    max_ratio: float = _opt(3.0, "Training pairs whose subword length ratio exceeds this are dropped.",
                            bounds=AT_LEAST_ONE)
    ratio_min_len: int = _opt(5, "The length-ratio filter only applies when the longer side has this many subwords.",
                              bounds=NON_NEGATIVE)
    lowercase: bool = _opt(False, "Lowercase all text before tokenization.")
    dedup: bool = _opt(False, "Drop training pairs identical (after normalization) to an earlier pair; "
                              "remembers 8-byte hashes, not text.")
    workers: int = _opt(0, "Processes that normalize and encode the training text (0: the CPU cores available).",
                        bounds=NON_NEGATIVE)


@dataclass
class TokenizerConfig(_Section):
    """Sentencepiece subword model."""

    KEY: ClassVar[str] = "tokenizer"

    type: str = _opt("unigram", "Sentencepiece model type.", ("unigram", "bpe"))
    vocab_size: int = _opt(8000, "Vocabulary size (per side when not joint).", bounds=Range(4.0, 1_000_000.0))
    joint: bool = _opt(True, "One vocabulary shared by source and target.")
    character_coverage: float = _opt(1.0, "Share of characters covered by the model (sentencepiece "
                                          "accepts 0.98 to 1).", bounds=Range(0.98, 1.0))
    hard_vocab_limit: bool = _opt(False, "Fail instead of shrinking when the corpus is too small for vocab_size.")
    sample_pairs: int = _opt(1_000_000, "Train sentencepiece on a random sample of this many training pairs "
                                        "(all pairs when there are fewer).", bounds=AT_LEAST_ONE)
    sample_seed: int = _opt(1, "Seed of the tokenizer's training sample.", bounds=NON_NEGATIVE)


@dataclass
class ModelConfig(_Section):
    """Architecture and sizes. Fields a family does not use are ignored by it."""

    KEY: ClassVar[str] = "model"

    arch: str = _opt("transformer", "Model family.", ("transformer", "rnn"))
    d_model: int = _opt(256, "transformer: model width (embedding and residual size).", bounds=AT_LEAST_ONE)
    ffn_dim: int = _opt(1024, "transformer: feed-forward inner size.", bounds=AT_LEAST_ONE)
    heads: int = _opt(4, "transformer: attention heads.", bounds=AT_LEAST_ONE)
    encoder_layers: int = _opt(3, "Encoder layers (GRU layers for rnn).", bounds=AT_LEAST_ONE)
    decoder_layers: int = _opt(3, "Decoder layers (GRU layers for rnn).", bounds=AT_LEAST_ONE)
    pre_norm: bool = _opt(True, "transformer: layer norm before each sublayer (with a final norm).")
    positions: str = _opt("sinusoidal", "transformer: position encoding.", ("sinusoidal", "learned"))
    max_positions: int = _opt(1024, "transformer: longest sequence learned positions cover.", bounds=AT_LEAST_ONE)
    self_attention: str = _opt("full", "transformer: self-attention variant (see nmt.models.attention).")
    window: int = _opt(8, "transformer local/sparse attention: neighbours seen on each side.", bounds=AT_LEAST_ONE)
    stride: int = _opt(8, "transformer sparse attention: every stride-th position is also seen.", bounds=AT_LEAST_ONE)
    temperature: float = _opt(1.0, "Softmax temperature of attention scores.", bounds=POSITIVE)
    emb_dim: int = _opt(256, "rnn: embedding size.", bounds=AT_LEAST_ONE)
    hidden_size: int = _opt(512, "rnn: decoder GRU size (encoder: half per direction).", bounds=Range(2.0))
    attention: str = _opt("additive", "rnn: attention of the decoder over the encoder "
                                      "(see nmt.models.attention).")
    input_feeding: bool = _opt(True, "rnn: feed the previous attentional vector into the decoder GRU.")
    dropout: float = _opt(0.1, "Dropout on embeddings, sublayer outputs and GRU outputs.", bounds=FRACTION)
    attention_dropout: float = _opt(0.0, "Dropout on attention weights.", bounds=FRACTION)
    tie_embeddings: bool = _opt(True, "Share source, target and output embeddings (needs a joint vocabulary).")


@dataclass
class TrainConfig(_Section):
    """Optimisation, schedule, precision, validation and stopping."""

    KEY: ClassVar[str] = "train"

    seed: int = _opt(1, "Seed for python, numpy, torch and the batch shuffler.", bounds=Range(0.0, 2.0**32 - 1))
    device: str = _opt("auto", "Where to train.", ("auto", "cpu", "cuda"))
    threads: int = _opt(0, "CPU threads for torch (0: leave torch's choice).", bounds=Range(0.0, 1024.0))
    batch_tokens: int = _opt(4096, "Token budget per batch, padding included (max of both sides).", bounds=AT_LEAST_ONE)
    accumulate: int = _opt(1, "Batches whose gradients are summed before one update.", bounds=AT_LEAST_ONE)
    max_steps: int = _opt(0, "Stop after this many updates (0: no limit).", bounds=NON_NEGATIVE)
    max_epochs: int = _opt(0, "Stop after this many epochs (0: no limit).", bounds=NON_NEGATIVE)
    max_minutes: float = _opt(0.0, "Stop after this much wall-clock training time (0: no limit).", bounds=NON_NEGATIVE)
    optimizer: str = _opt("adam", "Optimizer.", ("adam", "adamw"))
    lr: float = _opt(1e-3, "Peak learning rate (noam: the factor's base is d_model^-0.5 instead).", bounds=POSITIVE)
    betas: list[float] = _opt([0.9, 0.98], "Adam betas.", bounds=FRACTION)
    eps: float = _opt(1e-9, "Adam epsilon.", bounds=POSITIVE)
    weight_decay: float = _opt(0.0, "Weight decay (never on biases, norms and embeddings).", bounds=NON_NEGATIVE)
    lr_multipliers: dict[str, float] = _opt({}, "Learning-rate factors for parameters whose name contains the key.",
                                            bounds=NON_NEGATIVE)
    clip_norm: float = _opt(1.0, "Gradient norm clipping (0: off).", bounds=NON_NEGATIVE)
    schedule: str = _opt("inverse_sqrt", "Learning-rate schedule.",
                         ("noam", "inverse_sqrt", "constant", "plateau"))
    warmup: int = _opt(4000, "Linear warmup steps.", bounds=NON_NEGATIVE)
    noam_factor: float = _opt(1.0, "noam: scale factor.", bounds=POSITIVE)
    plateau_factor: float = _opt(0.5, "plateau: rate multiplier when validation stalls.",
                                 bounds=Range(0.0, 1.0, low_open=True))
    plateau_patience: int = _opt(2, "plateau: validations without improvement before decaying.", bounds=NON_NEGATIVE)
    min_lr: float = _opt(1e-5, "plateau: lowest rate.", bounds=NON_NEGATIVE)
    label_smoothing: float = _opt(0.1, "Label smoothing epsilon.", bounds=FRACTION)
    precision: str = _opt("fp32", "Arithmetic precision.", ("fp32", "bf16", "fp16"))
    tf32: bool = _opt(True, "On CUDA, let fp32 matrix products and convolutions use TF32 tensor cores (Ampere and "
                            "newer; inputs rounded to a 10-bit mantissa, sums in fp32): several times faster "
                            "in fp32 precision. No effect on the CPU or on bf16/fp16 products.")
    compile: bool = _opt(False, "Wrap the model in torch.compile.")
    log_every: int = _opt(50, "Updates between metrics.jsonl log lines.", bounds=AT_LEAST_ONE)
    tensorboard: bool = _opt(False, "Also write the metrics.jsonl figures as TensorBoard scalars under "
                                    "<run>/tensorboard (needs the tensorboard package).")
    eval_every: int = _opt(1000, "Updates between validations (0: once per epoch).", bounds=NON_NEGATIVE)
    eval_bleu: bool = _opt(True, "Compute greedy validation BLEU at each validation.")
    early_stop_metric: str = _opt("bleu", "Validation metric for early stopping and best checkpoints.",
                                  ("bleu", "loss"))
    patience: int = _opt(0, "Validations without improvement before stopping (0: never).", bounds=NON_NEGATIVE)
    keep_best: int = _opt(3, "Best checkpoints kept.", bounds=AT_LEAST_ONE)
    max_nonfinite: int = _opt(10, "Consecutive skipped non-finite updates before the run stops.", bounds=AT_LEAST_ONE)
    average_last: int = _opt(0, "Average this many best checkpoints for the final model (0: best only).",
                             bounds=NON_NEGATIVE)


AUTO = "auto"  # decode.length_penalty chosen on the validation split
TUNED_PENALTIES = (0.6, 1.0, 1.5, 2.0)  # the penalties `auto` tries
UNTUNED_PENALTY = 1.0  # what `auto` decodes at until a number is stored (validation BLEU, a model never tuned)
STOP_RULES = ("finished", "bound")


@dataclass
class DecodeConfig(_Section):
    """Search settings for validation, evaluation and translation."""

    KEY: ClassVar[str] = "decode"

    beam: int = _opt(5, "Beam size (1: greedy).", bounds=AT_LEAST_ONE)
    length_penalty: float | str = _opt(
        AUTO, "GNMT length penalty alpha (0: raw log-probability), or `auto`: at the end of training the final model "
              f"is scored on the validation split at {', '.join(map(str, TUNED_PENALTIES))} and the best is stored "
              "in its checkpoint (`nmt-evaluate RUN --split val --tune-length-penalty` does it later); a model whose "
              f"stored value is still `auto` decodes at {UNTUNED_PENALTY}.", bounds=NON_NEGATIVE)
    stop: str = _opt("finished", "When beam search ends a sentence: `finished` once `beam` hypotheses have ended "
                                 "(EOS), as CTranslate2, fairseq and Hugging Face do; `bound` only when no unfinished "
                                 "hypothesis could still beat the worst of them under the penalty (searches longer; "
                                 "at a large penalty it favours long outputs).", STOP_RULES)
    max_len_a: float = _opt(1.5, "Maximum output length is a * source length + b (and at most what the model's "
                                 "positions cover).", bounds=Range(0.0, 1000.0))
    max_len_b: int = _opt(10, "Maximum output length is a * source length + b.", bounds=Range(0.0, 100_000.0))
    batch_tokens: int = _opt(2000, "Source-token budget per decoding batch.", bounds=AT_LEAST_ONE)
    n_best: int = _opt(1, "Hypotheses returned per sentence.", bounds=AT_LEAST_ONE)
    max_source_tokens: int = _opt(250, "Longer sources are truncated to this many subwords before decoding (and "
                                       "to what the model's positions cover).", bounds=AT_LEAST_ONE)

    @property
    def alpha(self) -> float:
        """The penalty the search uses: `length_penalty`, or UNTUNED_PENALTY while it is still `auto`."""
        return UNTUNED_PENALTY if self.length_penalty == AUTO else float(self.length_penalty)


def check_decode(d: DecodeConfig, label: Callable[[str], str] = lambda key: f"decode.{key}") -> None:
    """The cross-field check of search settings (each field's range is checked when it is built)."""
    if isinstance(d.length_penalty, str) and d.length_penalty != AUTO:
        raise ConfigError(f"{label('length_penalty')}: got {short_repr(d.length_penalty)}, allowed: "
                          f"{NON_NEGATIVE.describe()} or {AUTO}")
    if d.stop not in STOP_RULES:
        raise ConfigError(f"{label('stop')}: {short_repr(d.stop)} is not one of {', '.join(STOP_RULES)}")
    if d.n_best > d.beam:
        raise ConfigError(f"{label('n_best')} ({d.n_best}) cannot exceed {label('beam')} ({d.beam})")


def decode_with(base: DecodeConfig, changes: dict[str, Any],
                label: Callable[[str], str] = lambda key: f"decode.{key}") -> DecodeConfig:
    """`base` with the non-None `changes` applied and checked as a whole; `label` names a setting in errors
    (a config key, or the command-line flag it came from)."""
    fields = {f.name: f for f in dataclasses.fields(DecodeConfig)}
    changes = {k: v for k, v in changes.items() if v is not None}
    for key, value in changes.items():
        if key not in fields:
            raise ConfigError(f"unknown decoding setting {key}")
        bounds = fields[key].metadata.get("bounds")
        if bounds is not None and isinstance(value, (int, float)):  # a word (length_penalty auto) is checked below
            bounds.check(value, label(key))
    cfg = dataclasses.replace(base, **changes)
    check_decode(cfg, label)
    return cfg


@dataclass
class Config:
    """A whole experiment."""

    name: str = _opt("experiment", "Experiment name: the run folder is <run_root>/<name>.")
    run_root: str = _opt("runs", "Folder holding run folders.")
    data: DataConfig = field(default_factory=DataConfig, metadata={"doc": "Data section."})
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig, metadata={"doc": "Tokenizer section."})
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"doc": "Model section."})
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc": "Training section."})
    decode: DecodeConfig = field(default_factory=DecodeConfig, metadata={"doc": "Decoding section."})

    @property
    def run_dir(self) -> Path:
        return Path(self.run_root) / self.name


_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _suggest(key: str, valid: list[str]) -> str:
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f" (did you mean '{near[0]}'?)" if near else f" (valid keys: {', '.join(valid)})"


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Check `value` against the type `hint`, converting only where no information is lost."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        *first, last = [a for a in typing.get_args(hint) if a is not type(None)]
        for arg in first:  # the first type that takes the value: `float | str` reads 2 as 2.0 and "auto" as text
            try:
                return _coerce(value, arg, where)
            except ConfigError:
                pass
        return _coerce(value, last, where)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {short_repr(value)}")
        (item,) = typing.get_args(hint)
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} {short_repr(value)}")
        key_t, val_t = typing.get_args(hint)
        return {_coerce(k, key_t, where): _coerce(v, val_t, f"{where}.{k}") for k, v in value.items()}
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "3e-4" as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str):
            return value
    else:
        raise ConfigError(f"{where}: unsupported type {hint}")
    raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__} {short_repr(value)}")


def _build(cls: type, raw: dict, where: str) -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise ConfigError(f"unknown key {short_repr(path)}{_suggest(str(key), list(fields))}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value if value is not None else {}, path)
            continue
        kwargs[key] = _coerce(value, hint, path)
        choices = fields[key].metadata.get("choices")
        if choices and kwargs[key] not in choices:
            raise ConfigError(f"{path}: {short_repr(kwargs[key])} is not one of {', '.join(choices)}")
    return cls(**kwargs)


def _set_path(tree: dict, dotted: str, value: Any) -> None:
    """Set `value` at the dotted key; a missing or empty section becomes a mapping."""
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: '{part}' is not a section")
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """Split `key.path=value`; the value is read as YAML (so 3, 0.1, true, [1, 2] keep their types)."""
    if "=" not in text:
        raise ConfigError(f"--set '{text}': expected key=value, for example train.lr=3e-4")
    key, raw = text.split("=", 1)
    try:
        value = strict_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def validate(cfg: Config) -> None:
    """Cross-field checks that need more than one key."""
    if not _NAME_RE.fullmatch(cfg.name):
        raise ConfigError(f"name: {short_repr(cfg.name)} must be letters, digits, '_', '-' or '.', not starting with "
                          "a dot (it names a folder under run_root)")
    m, t, tr, d = cfg.model, cfg.tokenizer, cfg.train, cfg.decode
    if m.arch == "transformer" and m.d_model % m.heads:
        raise ConfigError(f"model.d_model ({m.d_model}) must be divisible by model.heads ({m.heads})")
    if m.arch == "transformer" and m.max_positions < cfg.data.max_tokens + 2:
        raise ConfigError(f"model.max_positions ({m.max_positions}) must cover the longest training sequence, "
                          f"data.max_tokens + 2 for BOS/EOS ({cfg.data.max_tokens + 2})")
    if m.arch == "rnn" and m.hidden_size % 2:
        raise ConfigError(f"model.hidden_size ({m.hidden_size}) must be even (the encoder is bidirectional)")
    if m.tie_embeddings and not t.joint:
        raise ConfigError("model.tie_embeddings needs tokenizer.joint: true (one vocabulary for both sides)")
    if m.arch == "rnn" and m.tie_embeddings and m.emb_dim != m.hidden_size:
        raise ConfigError(f"model.tie_embeddings with arch rnn needs model.emb_dim ({m.emb_dim}) == "
                          f"model.hidden_size ({m.hidden_size}): the output layer shares the embedding")
    check_decode(d)
    if len(tr.betas) != 2:
        raise ConfigError("train.betas: expected two numbers")
    if tr.schedule in ("noam", "inverse_sqrt") and tr.warmup <= 0:
        raise ConfigError(f"train.warmup: schedule '{tr.schedule}' needs a positive warmup")
    if tr.max_steps <= 0 and tr.max_epochs <= 0 and tr.max_minutes <= 0:
        raise ConfigError("train: set at least one of max_steps, max_epochs, max_minutes")
    _validate_data(cfg.data)


def validate_new_run(cfg: Config) -> None:
    """Checks for a config a run starts from, not applied to the configs stored in earlier checkpoints (which
    load as they were written): settings that would be ignored or cut short."""
    tr, data = cfg.train, cfg.data
    if tr.average_last > tr.keep_best:
        raise ConfigError(f"train.average_last ({tr.average_last}) cannot exceed train.keep_best ({tr.keep_best}): "
                          "only the best keep_best checkpoints are kept to average")
    if data.dataset != "files":
        for key in (*FILES_KEYS, "train_corpora"):
            if getattr(data, key):
                raise ConfigError(f"data.{key}: only read when data.dataset is 'files', "
                                  f"not '{data.dataset}' (remove it or set data.dataset: files)")


FILES_KEYS = ("train_src", "train_tgt", "val_src", "val_tgt", "test_src", "test_tgt")


def _validate_data(data: DataConfig) -> None:
    """Where the training text comes from: old keys, several corpora, or both."""
    for i, entry in enumerate(data.train_corpora):
        if len(entry) not in (1, 2) or not all(entry):
            raise ConfigError(f"data.train_corpora[{i}]: expected [source, target] or [file.tsv], "
                              f"got {short_repr(entry)}")
    if data.dataset == "files":
        if bool(data.train_src) != bool(data.train_tgt) or not (data.train_src or data.train_corpora):
            key = "train_tgt" if data.train_src else "train_src"
            raise ConfigError(f"data.{key}: required when data.dataset is 'files' (or list data.train_corpora)")
        for key in ("val_src", "val_tgt"):
            if not getattr(data, key):
                raise ConfigError(f"data.{key}: required when data.dataset is 'files'")


def config_from_dict(raw: dict) -> Config:
    """Build and validate a Config from a plain mapping."""
    cfg = _build(Config, raw or {}, "")
    validate(cfg)
    return cfg


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply `--set key=value` overrides, and validate it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({cause(err)})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: config is not UTF-8 text") from None
    try:
        raw = strict_yaml(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: invalid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    try:
        for text_override in overrides:
            key, value = parse_override(text_override)
            _set_path(raw, key, value)
        cfg = config_from_dict(raw)
        validate_new_run(cfg)
        return cfg
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def to_dict(cfg: Any) -> dict:
    """The config as plain data (for YAML, JSON and checkpoints)."""
    return dataclasses.asdict(cfg)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML, atomically."""
    with atomic_output(path) as handle:
        handle.write(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is None:
        return getattr(hint, "__name__", str(hint))
    return str(hint).replace(" | ", " or ")  # a bar would split the Markdown table cell


def reference_markdown() -> str:
    """Markdown reference of every key, generated from the dataclasses."""
    lines = ["# Configuration reference", "",
             "Generated from `nmt/config.py` by `nmt-config-doc`; do not edit by hand.", ""]
    top = typing.get_type_hints(Config)
    simple = [f for f in dataclasses.fields(Config) if not dataclasses.is_dataclass(top[f.name])]
    sections = [f for f in dataclasses.fields(Config) if dataclasses.is_dataclass(top[f.name])]
    groups = [("top level", Config, simple)] + [
        (f.name, top[f.name], dataclasses.fields(top[f.name])) for f in sections]
    for title, cls, flds in groups:
        hints = typing.get_type_hints(cls)
        lines += [f"## `{title}`", "", (cls.__doc__ or "").strip(), "",
                  "| key | type | default | meaning |", "|---|---|---|---|"]
        for f in flds:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            doc = f.metadata.get("doc", "")
            if f.metadata.get("choices"):
                doc += " One of: " + ", ".join(f"`{c}`" for c in f.metadata["choices"]) + "."
            if f.metadata.get("bounds"):
                doc += f" Allowed: {f.metadata['bounds'].describe(hints[f.name] is int)}."
            lines.append(f"| `{f.name}` | {_type_name(hints[f.name])} | `{default!r}` | {doc} |")
        lines.append("")
    return "\n".join(lines)
