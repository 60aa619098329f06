"""Hugging Face interop: export a Transformer as a folder that `transformers` loads with its stock classes, and
import Marian/OPUS-MT folders (and these exports) as nmt checkpoints.

The stock class that holds each layout (no custom code, no trust_remote_code):
- post-norm, sinusoidal positions: MarianMTModel;
- pre-norm with final layer norms, sinusoidal positions: PegasusForConditionalGeneration;
- pre-norm, learned positions: BlenderbotForConditionalGeneration (learned positions from 0, no offset).
Post-norm with learned positions has none. Marian and Pegasus build their sinusoid with the sines in the first half
of the channels and the cosines in the second; ours interleaves them, at the same frequencies. Reordering the
d_model channels (`channel_order`) of every tensor that reads or writes the residual stream (embeddings, the
projections' input columns and output rows, layer norms, the output layer) turns one layout into the other
exactly: layer norms and residual sums do not depend on the order of the channels. An attention temperature is
folded into the query projections.

Both ways the tokenizer is MarianTokenizer's: `source.spm`, `target.spm` and `vocab.json` (and `target_vocab.json`
for separate vocabularies). On import the ids come from vocab.json, reordered so that nmt's special ids
(nmt.tokenizer) hold the folder's pad, unk, decoder start and EOS rows. Where the pad token is also the decoder
start (as in OPUS-MT), a padding row is added whose logit the output bias holds at SUPPRESSED_LOGIT, whose
probability is then exactly 0 in float32, so that every other token's probability is as it was.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import Loaded, load_model, save_checkpoint
from nmt.config import Config, ModelConfig, config_from_dict, to_dict
from nmt.data import sha256_file
from nmt.errors import CheckpointError, ExportError
from nmt.export import publish_export
from nmt.interop.hf_folder import ModelFolder, pick_tensors
from nmt.models import build_model, check_weights
from nmt.models.transformer import Transformer
from nmt.rundir import RunDir
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, model_pieces
from nmt.yamlsafe import short_repr

MANIFEST = "nmt_huggingface.json"
FORMAT_VERSION = 1
SOURCE_LANG, TARGET_LANG = "de", "en"
SUPPRESSED_LOGIT = -1e4  # the added padding row's logit: exp(-1e4 - max) is 0 in float32, and the loss stays finite
ADDED_PAD = "<nmt_pad>"  # the piece name of that row
CLASSES = {"marian": "MarianMTModel", "pegasus": "PegasusForConditionalGeneration",
           "blenderbot": "BlenderbotForConditionalGeneration"}
# transformers' ACT2FN names -> model.activation ("silu" and "swish" are both x * sigmoid(x))
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}


def import_transformers() -> Any:
    """The transformers module, or ExportError saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ExportError("transformers is not installed; install the hf extra: pip install 'nmt[hf]'") from None
    return transformers


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """transformers' progress bars off, its own logger's warnings unsaid (nmt says in one line what is wrong with
    a folder), and MarianTokenizer's advice to install sacremoses unsaid (nmt does not normalize punctuation, so
    an export must not either), for the time of the block; the settings are then as they were. Only the
    transformers logger is touched, never the root logger."""
    logs = transformers.utils.logging
    bars, verbosity = logs.is_progress_bar_enabled(), logs.get_verbosity()
    logs.disable_progress_bar()
    logs.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
            yield
    finally:
        logs.set_verbosity(verbosity)
        if bars:
            logs.enable_progress_bar()


def channel_order(d: int) -> torch.Tensor:
    """Channel j of Marian's and Pegasus's layout is our channel `channel_order(d)[j]`: our sines (the even
    channels), then our cosines (the odd ones)."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def hf_kind(cfg: ModelConfig) -> str:
    """The transformers model type that holds a model of these settings, or ExportError saying why none does."""
    if cfg.arch != "transformer":
        raise ExportError(f"a {cfg.arch} model cannot be exported to Hugging Face: transformers has no stock class "
                          "for a GRU encoder-decoder with attention (only Transformer checkpoints can be exported)")
    if cfg.self_attention != "full":
        raise ExportError(f"self-attention '{cfg.self_attention}' has no equivalent in transformers' stock "
                          "encoder-decoders (only 'full' can be exported)")
    if cfg.pre_norm:
        return "pegasus" if cfg.positions == "sinusoidal" else "blenderbot"
    if cfg.positions == "learned":
        raise ExportError("a post-norm Transformer with learned positions has no stock class in transformers "
                          "(MarianMTModel's positions are sinusoidal; the pre-norm classes do not fit)")
    return "marian"


# ---------------------------------------------------------------------------------------------- tensor names


@dataclass(frozen=True)
class _Tensor:
    """One transformers tensor and where it lies in ours."""

    ours: str  # our state-dict key
    hf: str  # transformers' key
    axis: int | None  # the axis along the residual stream's channels (None: not on the residual stream)
    part: int = 0  # which of `parts` equal blocks of rows of ours it is (fused projections)
    parts: int = 1
    query: bool = False  # a query projection (an attention temperature is folded into it)


def _tensors(cfg: ModelConfig) -> list[_Tensor]:
    """Every transformers tensor of the layers and norms (embeddings and the output layer are `_vocabulary_keys`)."""
    out: list[_Tensor] = []

    def linear(ours: str, hf: str, reads: bool, parts: int = 1, part: int = 0, query: bool = False) -> None:
        # a weight is (out, in): a projection reading the residual stream has it along its columns, one writing it
        # along its rows, and then its bias too
        out.append(_Tensor(f"{ours}.weight", f"{hf}.weight", 1 if reads else 0, part, parts, query))
        out.append(_Tensor(f"{ours}.bias", f"{hf}.bias", None if reads else 0, part, parts, query))

    def norm(ours: str, hf: str) -> None:
        out.extend(_Tensor(f"{ours}.{name}", f"{hf}.{name}", 0) for name in ("weight", "bias"))

    def feed_forward(ours: str, hf: str, norm_index: int) -> None:
        linear(f"{ours}.ffn.0", f"{hf}.fc1", True)
        linear(f"{ours}.ffn.2", f"{hf}.fc2", False)
        norm(f"{ours}.norms.{norm_index}", f"{hf}.final_layer_norm")

    def self_attention(ours: str, hf: str) -> None:
        for i, name in enumerate("qkv"):
            linear(f"{ours}.self_attn.qkv", f"{hf}.self_attn.{name}_proj", True, 3, i, query=i == 0)
        linear(f"{ours}.self_attn.out", f"{hf}.self_attn.out_proj", False)
        norm(f"{ours}.norms.0", f"{hf}.self_attn_layer_norm")

    for i in range(cfg.encoder_layers):
        self_attention(f"encoder_layers.{i}", f"model.encoder.layers.{i}")
        feed_forward(f"encoder_layers.{i}", f"model.encoder.layers.{i}", 1)
    for i in range(cfg.decoder_layers):
        ours, hf = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        self_attention(ours, hf)
        linear(f"{ours}.cross_attn.q", f"{hf}.encoder_attn.q_proj", True, query=True)
        for j, name in enumerate("kv"):
            linear(f"{ours}.cross_attn.kv", f"{hf}.encoder_attn.{name}_proj", True, 2, j)
        linear(f"{ours}.cross_attn.out", f"{hf}.encoder_attn.out_proj", False)
        norm(f"{ours}.norms.1", f"{hf}.encoder_attn_layer_norm")
        feed_forward(ours, hf, 2)
    if cfg.pre_norm:
        norm("encoder_norm", "model.encoder.layer_norm")
        norm("decoder_norm", "model.decoder.layer_norm")
    if cfg.positions == "learned":
        out.append(_Tensor("src_embed.learned.weight", "model.encoder.embed_positions.weight", 1))
        out.append(_Tensor("tgt_embed.learned.weight", "model.decoder.embed_positions.weight", 1))
    return out


def _vocabulary_keys(kind: str, tied: bool) -> dict[str, list[str]]:
    """Our source embedding, target embedding and output layer -> the transformers keys holding each."""
    if tied:
        shared = ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                  "lm_head.weight"]
        return {"src_embed.tokens.weight": shared}
    # Pegasus and Blenderbot keep a shared embedding that an untied model does not use; it holds the source's
    source = ["model.encoder.embed_tokens.weight"] + ([] if kind == "marian" else ["model.shared.weight"])
    return {"src_embed.tokens.weight": source, "tgt_embed.tokens.weight": ["model.decoder.embed_tokens.weight"],
            "output.weight": ["lm_head.weight"]}


def _on_channels(tensor: torch.Tensor, axis: int | None, order: torch.Tensor) -> torch.Tensor:
    return tensor if axis is None else tensor.index_select(axis, order)


def to_hf_weights(model: Transformer, cfg: ModelConfig, kind: str) -> dict[str, torch.Tensor]:
    """Our weights under transformers' names and in its channel layout."""
    state = {key: value.detach().float().cpu() for key, value in model.state_dict().items()}
    d = cfg.d_model
    order = channel_order(d) if kind in ("marian", "pegasus") else torch.arange(d)
    out = {}
    for t in _tensors(cfg):
        value = state[t.ours]
        rows = value.size(0) // t.parts
        value = value[t.part * rows:(t.part + 1) * rows]
        if t.query:  # softmax(q k / (sqrt(dh) t)) == softmax((q / t) k / sqrt(dh))
            value = value / cfg.temperature
        out[t.hf] = _on_channels(value, t.axis, order).contiguous()
    tied = cfg.tie_embeddings
    for ours, names in _vocabulary_keys(kind, tied).items():
        for name in names:
            out[name] = state[ours].index_select(1, order).contiguous()
    vocab_out = state["output.weight"].size(0)
    out["final_logits_bias"] = state.get("output.bias", torch.zeros(vocab_out))[None].clone()  # (1, V)
    return out


def from_hf_weights(hf: dict[str, torch.Tensor], cfg: ModelConfig, kind: str, src_rows: list[int | None],
                    tgt_rows: list[int | None]) -> dict[str, torch.Tensor]:
    """Our state dict from transformers' tensors; our row i of the source (target) vocabulary is the folder's row
    `src_rows[i]` (`tgt_rows[i]`), None for the added padding row."""
    d = cfg.d_model
    inverse = torch.argsort(channel_order(d)) if kind in ("marian", "pegasus") else torch.arange(d)
    blocks: dict[str, list[torch.Tensor | None]] = {}
    for t in _tensors(cfg):
        blocks.setdefault(t.ours, [None] * t.parts)[t.part] = _on_channels(hf[t.hf].float(), t.axis, inverse)
    out = {key: torch.cat(parts).contiguous() for key, parts in blocks.items()}

    def rows(matrix: torch.Tensor, picks: list[int | None]) -> torch.Tensor:
        added = torch.cat([matrix, matrix.new_zeros(1, *matrix.shape[1:])])  # the last row: the added padding row
        index = torch.tensor([len(matrix) if p is None else p for p in picks])
        return added.index_select(0, index).contiguous()

    source = hf["model.encoder.embed_tokens.weight"].float().index_select(1, inverse)
    target = hf["model.decoder.embed_tokens.weight"].float().index_select(1, inverse)
    output = hf["lm_head.weight"].float().index_select(1, inverse)
    out["src_embed.tokens.weight"] = rows(source, src_rows)
    out["tgt_embed.tokens.weight"] = out["src_embed.tokens.weight"] if cfg.tie_embeddings else rows(target, tgt_rows)
    out["output.weight"] = out["tgt_embed.tokens.weight"] if cfg.tie_embeddings else rows(output, tgt_rows)
    if cfg.output_bias:
        bias = rows(hf["final_logits_bias"].float().reshape(-1, 1), tgt_rows)[:, 0]  # (V,)
        out["output.bias"] = bias.masked_fill(torch.tensor([p is None for p in tgt_rows]), SUPPRESSED_LOGIT)
    return out


# ---------------------------------------------------------------------------------------------- export


def _hf_config(transformers: Any, loaded: Loaded, kind: str) -> Any:
    cfg, vocab = loaded.cfg.model, loaded.tokenizer.vocab
    if kind != "marian" and vocab.src_size != vocab.tgt_size:
        raise ExportError(f"{loaded.path}: a pre-norm model with source and target vocabularies of different sizes "
                          f"({vocab.src_size}, {vocab.tgt_size}) has no stock class (Pegasus and Blenderbot hold "
                          "one vocabulary size)")
    common = dict(vocab_size=vocab.src_size, d_model=cfg.d_model, encoder_layers=cfg.encoder_layers,
                  decoder_layers=cfg.decoder_layers, encoder_ffn_dim=cfg.ffn_dim, decoder_ffn_dim=cfg.ffn_dim,
                  encoder_attention_heads=cfg.heads, decoder_attention_heads=cfg.heads,
                  max_position_embeddings=cfg.max_positions, activation_function=cfg.activation,
                  scale_embedding=True, dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
                  activation_dropout=0.0, pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID,
                  decoder_start_token_id=BOS_ID, forced_eos_token_id=EOS_ID, tie_word_embeddings=cfg.tie_embeddings)
    if kind == "marian":
        return transformers.MarianConfig(**common, decoder_vocab_size=vocab.tgt_size,
                                         share_encoder_decoder_embeddings=cfg.tie_embeddings)
    if kind == "pegasus":
        return transformers.PegasusConfig(**common)
    return transformers.BlenderbotConfig(**common)


def _generation_config(transformers: Any, loaded: Loaded) -> Any:
    """Our special ids and decoding settings in transformers' terms (docs/huggingface.md says what differs)."""
    d = loaded.cfg.decode
    longest = min(math.floor(d.max_len_a * (d.max_source_tokens + 1) + d.max_len_b), loaded.cfg.model.max_positions - 1)
    return transformers.GenerationConfig(
        decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        forced_eos_token_id=EOS_ID, num_beams=d.beam, length_penalty=d.alpha, early_stopping=d.stop == "finished",
        max_length=longest + 2)  # the decoder start, at most `longest` tokens, then EOS


def _write_tokenizer(transformers: Any, tokenizer: Tokenizer, folder: Path, max_length: int) -> None:
    """MarianTokenizer's files for our tokenizer, written by MarianTokenizer itself."""
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch)
        tokenizer.save(raw)
        names = ["spm.model"] if (raw / "spm.model").is_file() else ["src.model", "tgt.model"]
        protos = [(raw / name).read_bytes() for name in names]
        tables = tokenizer.tables or [model_pieces(proto) for proto in protos]
        (raw / "source.spm").write_bytes(protos[0])
        (raw / "target.spm").write_bytes(protos[-1])
        vocab_files = [raw / "vocab.json", raw / "target_vocab.json"][:len(tables)]
        for path, table in zip(vocab_files, tables, strict=True):
            path.write_text(json.dumps({piece: i for i, piece in enumerate(table)}, ensure_ascii=False),
                            encoding="utf-8")
        marian = transformers.MarianTokenizer(
            source_spm=str(raw / "source.spm"), target_spm=str(raw / "target.spm"), vocab=str(vocab_files[0]),
            target_vocab_file=str(vocab_files[-1]) if len(tables) == 2 else None, separate_vocabs=len(tables) == 2,
            source_lang=SOURCE_LANG, target_lang=TARGET_LANG, unk_token=tables[0][UNK_ID],
            eos_token=tables[0][EOS_ID], pad_token=tables[0][PAD_ID], model_max_length=max_length)
        marian.save_pretrained(str(folder))


def _test_report(loaded: Loaded) -> dict[str, Any] | None:
    """The test report of the run folder the checkpoint lies in, when it scored this very checkpoint."""
    path = RunDir(loaded.path.parent.parent).report("test")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        scores = report["scores"]
        if report.get("checkpoint_sha256") != sha256_file(loaded.path):
            return None
        return {"sentences": report["sentences"], "decode": report["decode"], **{
            key: scores[key] for key in ("bleu", "bleu_signature", "chrf", "chrf_signature")}}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def model_card(loaded: Loaded, kind: str, report: dict[str, Any] | None) -> str:
    """README.md in the Hub's format: YAML metadata (languages, the license left to the user, the data, the test
    scores as model-index) and what the model is."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    cfg = loaded.cfg
    dataset = {"multi30k": "Multi30k (WMT16 multimodal task 1)", "sample": "nmt's embedded sample corpus",
               "files": "the user's own parallel files"}[cfg.data.dataset]
    results = []
    if report is not None:
        for metric, name in (("bleu", "BLEU"), ("chrf", "chrF")):
            results.append(EvalResult(
                task_type="translation", task_name=f"Translation {SOURCE_LANG}-{TARGET_LANG}",
                dataset_type=cfg.data.dataset, dataset_name=f"{dataset}, test split", dataset_split="test",
                metric_type=metric, metric_name=name, metric_value=report[metric],
                metric_config=report[f"{metric}_signature"]))
    data = ModelCardData(language=[SOURCE_LANG, TARGET_LANG], license="unknown", library_name="transformers",
                         pipeline_tag="translation", tags=["translation", "nmt"], datasets=[cfg.data.dataset],
                         model_name=cfg.name, eval_results=results or None)
    m = cfg.model
    lines = [
        f"# {cfg.name}", "",
        f"A {SOURCE_LANG}->{TARGET_LANG} Transformer trained with nmt on {dataset}, converted to "
        f"`{CLASSES[kind]}` (a stock transformers class) by `nmt-export --format huggingface`.", "",
        "**License**: not set. Choose one and put it in the `license` field above before publishing.", "",
        "## Model", "",
        f"- {'pre' if m.pre_norm else 'post'}-norm, {m.encoder_layers}+{m.decoder_layers} layers, d_model "
        f"{m.d_model}, {m.heads} heads, feed-forward {m.ffn_dim} ({m.activation}), {m.positions} positions, "
        f"{'tied' if m.tie_embeddings else 'untied'} embeddings",
        f"- checkpoint: `{loaded.path.name}`, sha256 `{sha256_file(loaded.path)}`, "
        f"{loaded.progress.get('step', 'unknown')} updates", "",
        "## Test scores", "",
    ]
    if report is None:
        lines.append("The run folder holds no test report of this checkpoint.")
    else:
        lines += [f"On the test split ({report['sentences']} sentences), beam {report['decode']['beam']}, "
                  f"decoded by nmt:", "",
                  f"- BLEU {report['bleu']:.2f} (sacreBLEU `{report['bleu_signature']}`)",
                  f"- chrF {report['chrf']:.2f} (sacreBLEU `{report['chrf_signature']}`)"]
    lines += [
        "", "## Use", "", "```python", "from transformers import pipeline", "",
        'translate = pipeline("translation", model="PATH_OR_REPO")',
        'print(translate("Ein Mann fährt Fahrrad.")[0]["translation_text"])', "```", "",
        "## What the transformers tokenizer does not reproduce", "",
        "- nmt normalizes input text before sentencepiece (Unicode NFC, whitespace collapsed"
        + (", lowercased: this model was trained on lowercased text, so lowercase the input yourself" if
           cfg.data.lowercase else "") + "); MarianTokenizer does not.",
        f"- nmt truncates a source to {cfg.decode.max_source_tokens} subwords; the tokenizer only truncates when "
        "asked (`truncation=True`, to `model_max_length`).",
        "- With `sacremoses` installed, MarianTokenizer applies Moses punctuation normalization first; nmt does not.",
        "- Beam search ranks finished hypotheses by log-probability / length ** length_penalty, nmt by the GNMT "
        "penalty ((5 + length) / 6) ** alpha, and its length cap is `max_length` for the whole batch, nmt's "
        f"{cfg.decode.max_len_a} * source length + {cfg.decode.max_len_b} per sentence. Greedy search agrees.", "",
    ]
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))
    return str(card)


def export_huggingface(source: str | Path, output: str | Path) -> dict[str, Any]:
    """Convert a Transformer checkpoint (or a run folder's final model) into a transformers model folder; returns
    the manifest. Nothing is left behind on failure: the folder is built beside `output` and renamed into place."""
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ExportError(f"{output}: already exists; choose a new folder")
    loaded = load_model(source, torch.device("cpu"))
    try:
        kind = hf_kind(loaded.cfg.model)
    except ExportError as err:
        raise ExportError(f"{loaded.path}: {err}") from None
    transformers = import_transformers()
    hf_config = _hf_config(transformers, loaded, kind)
    torch.manual_seed(0)  # the stock class draws its initial weights, all replaced below
    hf = getattr(transformers, CLASSES[kind])(hf_config).eval()
    weights = to_hf_weights(loaded.model, loaded.cfg.model, kind)
    state = hf.state_dict()
    computed = {key for key in state if key.endswith("embed_positions.weight")} if kind != "blenderbot" else set()
    if set(weights) | computed != set(state):
        raise ExportError(f"{loaded.path}: the {CLASSES[kind]} of transformers {transformers.__version__} has other "
                          f"tensors than nmt knows ({sorted(set(state) ^ (set(weights) | computed))[:4]}); use the "
                          "transformers version in pyproject.toml")
    with torch.no_grad():
        for key, value in weights.items():
            state[key].copy_(value)
    hf.generation_config = _generation_config(transformers, loaded)

    def fill(tmp: Path) -> None:
        with _quiet(transformers):
            hf.save_pretrained(str(tmp))
            _write_tokenizer(transformers, loaded.tokenizer, tmp, loaded.cfg.model.max_positions - 1)
        (tmp / "README.md").write_text(model_card(loaded, kind, _test_report(loaded)), encoding="utf-8")

    head = {"format": "huggingface", "format_version": FORMAT_VERSION, "class": CLASSES[kind],
            "transformers_version": transformers.__version__}
    return publish_export(output, loaded, MANIFEST, head, fill)


# ---------------------------------------------------------------------------------------------- import


# config.json's sizes, each a whole number of at least 1 (anything else is refused before transformers reads them)
SIZE_KEYS = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_ffn_dim", "decoder_ffn_dim",
             "encoder_attention_heads", "decoder_attention_heads", "max_position_embeddings")


def _hf_settings(transformers: Any, raw: dict[str, Any], folder: Path) -> tuple[str, Any]:
    """The model type and transformers' config of a folder's config.json, whose sizes are whole numbers."""
    kind = raw.get("model_type")
    if kind not in CLASSES:
        raise ExportError(f"{folder}/config.json: model_type {short_repr(kind)} is not one nmt imports "
                          f"({', '.join(CLASSES)})")
    for key in (*SIZE_KEYS, "decoder_vocab_size"):
        value = raw.get(key)
        if key in raw and not (key == "decoder_vocab_size" and value is None) and (  # null: vocab_size
                not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ExportError(f"{folder}/config.json: {key} {short_repr(value)} is not a whole number of at least 1")
    try:
        with _quiet(transformers):
            return kind, getattr(transformers, CLASSES[kind]).config_class.from_dict(raw)
    except Exception as err:  # noqa: BLE001 - transformers refuses a config in many ways
        detail = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        raise ExportError(f"{folder}/config.json: transformers cannot read it ({detail})") from None


def _table(folder: ModelFolder, name: str) -> list[str]:
    """The pieces of a vocab.json by id; its ids must be 0 to n - 1, once each."""
    vocab = folder.json(name)
    path = folder.path / name
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ExportError(f"{path}: not a mapping of subwords to ids")
    table = [""] * len(vocab)
    for piece, i in vocab.items():
        if not 0 <= i < len(table) or table[i]:
            raise ExportError(f"{path}: its ids are not 0 to {len(table) - 1}, each once (id {i})")
        table[i] = piece
    return table


def _reorder(table: list[str], pad: int, unk: int, start: int, eos: int) -> list[int | None]:
    """The folder's id of each of our ids: the special ids first as nmt numbers them, then the rest in order; None
    stands for an added padding row (the folder's pad is its decoder start)."""
    if len({pad, unk, eos}) < 3 or start in (unk, eos):  # only the decoder start may be the pad token
        raise ExportError(f"the special ids pad {pad}, unk {unk}, decoder start {start} and EOS {eos} overlap")
    if max(pad, unk, start, eos) >= len(table) or min(pad, unk, start, eos) < 0:
        raise ExportError(f"a special id (pad {pad}, unk {unk}, decoder start {start}, EOS {eos}) is outside the "
                          f"vocabulary of {len(table)}")
    picks: list[int | None] = [None] * 4
    picks[PAD_ID] = None if pad == start else pad
    picks[UNK_ID], picks[BOS_ID], picks[EOS_ID] = unk, start, eos
    return picks + [i for i in range(len(table)) if i not in {pad, unk, start, eos}]


def _vocabularies(files: ModelFolder, config: Any,
                  generation: dict[str, Any]) -> tuple[list[list[str]], list[list[int | None]]]:
    """The folder's vocabularies (vocab.json, and target_vocab.json where tokenizer_config.json says they are
    separate), checked against config.json's sizes, and for each the folder's id of each of our ids (`_reorder`)."""
    folder = files.path
    tokenizer_config = files.json_object("tokenizer_config.json", optional=True)
    separate = bool(tokenizer_config.get("separate_vocabs", False))
    names = ["vocab.json", "target_vocab.json" if separate else "vocab.json"]
    tables = [_table(files, name) for name in dict.fromkeys(names)]  # one table for a joint vocabulary
    sizes = {"vocab_size": config.vocab_size,
             "decoder_vocab_size": getattr(config, "decoder_vocab_size", None) or config.vocab_size}
    for table, (key, size), name in zip(tables * (3 - len(tables)), sizes.items(), names, strict=True):
        if len(table) != size:
            raise ExportError(f"{folder}/{name}: {len(table):,} entries, but config.json's {key} {size:,}")
    unk_piece = str(tokenizer_config.get("unk_token", "<unk>"))
    if unk_piece not in tables[0]:
        raise ExportError(f"{folder}/vocab.json: has no unknown-word piece {short_repr(unk_piece)}")
    pad = _setting(generation, "pad_token_id", config.pad_token_id, (int,), folder)
    eos = generation.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) and eos else eos
    eos = config.eos_token_id if eos is None else eos
    start = _setting(generation, "decoder_start_token_id", config.decoder_start_token_id, (int,), folder)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in (pad, eos, start)):
        raise ExportError(f"{folder}: the pad ({pad}), EOS ({eos}) and decoder start ({start}) ids must be numbers")
    try:
        return tables, [_reorder(table, pad, table.index(unk_piece) if unk_piece in table else -1, start, eos)
                        for table in tables]
    except ExportError as err:
        raise ExportError(f"{folder}: {err}") from None


def _model_settings(config: Any, folder: Path, kind: str) -> dict[str, Any]:
    """Our model section for a transformers config, or ExportError naming what nmt cannot hold."""
    def refuse(what: str) -> ExportError:
        return ExportError(f"{folder}/config.json: {what}; nmt's Transformer cannot hold it")

    if config.encoder_attention_heads != config.decoder_attention_heads:
        raise refuse(f"{config.encoder_attention_heads} encoder and {config.decoder_attention_heads} decoder heads")
    if config.encoder_ffn_dim != config.decoder_ffn_dim:
        raise refuse(f"feed-forward sizes {config.encoder_ffn_dim} and {config.decoder_ffn_dim} differ")
    if config.activation_function not in HF_ACTIVATIONS:
        raise refuse(f"activation_function {short_repr(config.activation_function)} (nmt has "
                     f"{', '.join(HF_ACTIVATIONS)})")
    if not config.scale_embedding:
        raise refuse("scale_embedding is false (nmt always scales embeddings by sqrt(d_model))")
    if config.d_model % config.encoder_attention_heads:
        raise refuse(f"d_model {config.d_model} is not divisible by {config.encoder_attention_heads} heads")
    if kind == "marian" and config.d_model % 2:
        raise refuse(f"d_model {config.d_model} is odd")
    shared = getattr(config, "share_encoder_decoder_embeddings", True) and config.tie_word_embeddings
    return {"arch": "transformer", "d_model": config.d_model, "ffn_dim": config.encoder_ffn_dim,
            "activation": HF_ACTIVATIONS[config.activation_function], "heads": config.encoder_attention_heads,
            "encoder_layers": config.encoder_layers, "decoder_layers": config.decoder_layers,
            "pre_norm": kind != "marian", "positions": "learned" if kind == "blenderbot" else "sinusoidal",
            "max_positions": config.max_position_embeddings, "dropout": float(config.dropout),
            "attention_dropout": float(config.attention_dropout), "tie_embeddings": bool(shared)}


def _setting(generation: dict[str, Any], key: str, default: Any, kinds: tuple[type, ...], folder: Path) -> Any:
    """generation_config.json's `key`, or `default` where it is absent or null (transformers 5 writes null for a
    setting left at its default); ExportError when it is not one of `kinds`."""
    value = generation.get(key)
    if value is None:
        return default
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise ExportError(f"{folder}/generation_config.json: {key} {short_repr(value)} is not a number")
    return value


def _run_name(folder: Path) -> str:
    """A valid run name from the folder's own name (that of the current folder for `.`), each run of characters
    other than letters, digits, '_', '-' and '.' turned into one '_'."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(os.path.abspath(folder)).name).strip("_.-")
    return name[:200] or "imported"


def _nmt_config(raw: dict[str, Any], folder: Path) -> Config:
    try:
        return config_from_dict(raw)
    except ValueError as err:
        raise ExportError(f"{folder}: its settings do not make a valid nmt config ({err})") from None


def _needed(cfg: ModelConfig) -> list[str]:
    """transformers' names of the tensors `from_hf_weights` reads."""
    return [t.hf for t in _tensors(cfg)] + ["model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                                            "lm_head.weight", "final_logits_bias"]


def _shapes_model(transformers: Any, kind: str, config: Any, folder: Path) -> torch.nn.Module:
    """transformers' class for `config` on the meta device: every tensor's name and shape, no memory."""
    try:
        with _quiet(transformers), torch.device("meta"):
            return getattr(transformers, CLASSES[kind])(config)
    except Exception as err:  # noqa: BLE001 - transformers refuses settings in many ways
        detail = " ".join(str(err).split())[:300]
        raise ExportError(f"{folder}/config.json: transformers cannot build its model ({type(err).__name__}: "
                          f"{detail})") from None


def import_huggingface(folder: str | Path, output: str | Path) -> dict[str, Any]:
    """Convert a local MarianMT folder (OPUS-MT's layout; or a Pegasus or Blenderbot one as nmt exports them) into
    an nmt checkpoint at `output`; returns what the checkpoint records of its source.

    The folder is untrusted input (`nmt.interop.hf_folder`): what it holds is checked before a model of its size is
    allocated, and a missing, misshapen or non-finite tensor is refused."""
    folder, output = Path(folder), Path(output)
    if output.exists():
        raise ExportError(f"{output}: already exists; choose a new checkpoint path")
    files = ModelFolder(folder)
    raw_config = files.json_object("config.json")
    transformers = import_transformers()
    kind, config = _hf_settings(transformers, raw_config, folder)
    model = _model_settings(config, folder, kind)
    generation = files.json_object("generation_config.json", optional=True)
    tables, orders = _vocabularies(files, config, generation)
    ours = [[ADDED_PAD if i is None else table[i] for i in order] for table, order in zip(tables, orders, strict=True)]
    if ADDED_PAD in tables[0]:
        raise ExportError(f"{folder}/vocab.json: already holds the piece {ADDED_PAD!r} nmt adds for padding")
    added = orders[-1][PAD_ID] is None
    spm_src, spm_tgt = files.read("source.spm"), files.read("target.spm")
    try:
        tokenizer = Tokenizer(spm_src, None if spm_src == spm_tgt else spm_tgt, ours)
    except ValueError as err:
        raise ExportError(f"{folder}: source.spm, target.spm and vocab.json do not make a tokenizer ({err})") from None
    decode = {"beam": _setting(generation, "num_beams", 1, (int,), folder),
              "length_penalty": float(_setting(generation, "length_penalty", 1.0, (int, float), folder))}
    raw = {"name": _run_name(folder), "data": {"max_tokens": min(128, model["max_positions"] - 2)},
           "tokenizer": {"joint": len(tables) == 1, "vocab_size": len(ours[-1])},
           "model": {**model, "output_bias": added}, "decode": decode}
    cfg = _nmt_config(raw, folder)  # sizes within nmt's bounds before transformers builds anything of them
    found = files.tensors(files.weight_files(raw_config))
    if "final_logits_bias" not in found:  # transformers too reads a Marian file without it as all zeros, by design
        found["final_logits_bias"] = torch.zeros(1, len(tables[-1]))
    hf = pick_tensors(found, _shapes_model(transformers, kind, config, folder), _needed(cfg.model), folder)
    if not added and hf["final_logits_bias"].abs().max() > 0:
        raw["model"]["output_bias"] = True
        cfg = _nmt_config(raw, folder)
    weights = from_hf_weights(hf, cfg.model, kind, orders[0], orders[-1])
    del found, hf  # the folder's own tensors, freed before the model is built
    try:
        check_weights(cfg.model, tokenizer.vocab, weights)
    except CheckpointError as err:
        raise ExportError(f"{folder}: {err}") from None
    net = build_model(cfg.model, tokenizer.vocab)
    net.load_state_dict(weights)
    source = {"folder": str(folder), "model_type": kind, "transformers_version": transformers.__version__,
              "files": files.digests, "config": raw_config, "added_padding_row": added}
    save_checkpoint({"config": to_dict(cfg), "model_config": to_dict(cfg.model), "vocab": vars(tokenizer.vocab),
                     "tokenizer": tokenizer.to_bytes(), "tokenizer_id": tokenizer.identity,
                     "model": net.state_dict(), "progress": {"imported": source}}, output)
    return source
