"""Export a Transformer as a folder that `transformers` loads with its stock classes (`nmt.interop.hf_weights` says
which class holds which layout): the weights, MarianTokenizer's files (`source.spm`, `target.spm`, `vocab.json`,
and `target_vocab.json` for separate vocabularies), the generation settings and a model card."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import LoadedModel, load_model
from nmt.config import FILES_KEYS, Config
from nmt.errors import ExportError
from nmt.export import publish_export
from nmt.fileio import sha256_file
from nmt.interop.hf_weights import CLASSES, hf_kind, import_transformers, quiet, to_hf_weights
from nmt.run.folder import RunDir
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, model_pieces

MANIFEST = "nmt_huggingface.json"
FORMAT_VERSION = 1


def _hf_config(transformers: Any, loaded: LoadedModel, kind: str) -> Any:
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


def _generation_config(transformers: Any, loaded: LoadedModel) -> Any:
    """Our special ids and decoding settings in transformers' terms (docs/huggingface.md says what differs)."""
    d = loaded.cfg.decode
    longest = min(math.floor(d.max_len_a * (d.max_source_tokens + 1) + d.max_len_b), loaded.cfg.model.max_positions - 1)
    never = sorted(loaded.tokenizer.never_emit)  # reserved tags: generate must not emit them either
    return transformers.GenerationConfig(
        decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        forced_eos_token_id=EOS_ID, num_beams=d.beam, length_penalty=d.alpha, early_stopping=d.stop == "finished",
        max_length=longest + 2,  # the decoder start, at most `longest` tokens, then EOS
        **({"bad_words_ids": [[i] for i in never]} if never else {}))


def _write_tokenizer(transformers: Any, tokenizer: Tokenizer, folder: Path, max_length: int,
                     languages: tuple[str, str]) -> None:
    """MarianTokenizer's files for our tokenizer (translating `languages`: source, target), written by
    MarianTokenizer itself."""
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
            source_lang=languages[0], target_lang=languages[1], unk_token=tables[0][UNK_ID],
            eos_token=tables[0][EOS_ID], pad_token=tables[0][PAD_ID], model_max_length=max_length)
        marian.save_pretrained(str(folder))


def _test_report(loaded: LoadedModel) -> dict[str, Any] | None:
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


def corpus_files(cfg: Config) -> list[str]:
    """The names (not the folders: a card is published) of a `files` dataset's corpus files, in config order."""
    paths = [getattr(cfg.data, key) for key in FILES_KEYS] + [p for entry in cfg.data.corpora for p in entry.files]
    return [Path(path).name for path in paths if path]


def model_card(loaded: LoadedModel, kind: str, report: dict[str, Any] | None, transformers_version: str) -> str:
    """README.md in the Hub's format: YAML metadata (languages, the license left to the user, the data: Multi30k,
    or "custom" with the corpus files' names, the test scores as model-index), what the model is, and a usage
    snippet that runs with `transformers_version`, the version that wrote the folder."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    cfg = loaded.cfg
    src, tgt = cfg.data.languages
    custom = cfg.data.dataset in ("files", "sample")
    extra = {"training_files": corpus_files(cfg)} if cfg.data.dataset == "files" else {}
    dataset = {"multi30k": "Multi30k (WMT16 multimodal task 1)", "sample": "nmt's embedded sample corpus",
               "files": f"custom parallel files ({', '.join(corpus_files(cfg))})"}.get(cfg.data.dataset,
                                                                                         cfg.data.dataset)
    results = []
    if report is not None:
        for metric, name in (("bleu", "BLEU"), ("chrf", "chrF")):
            results.append(EvalResult(
                task_type="translation", task_name=f"Translation {src}-{tgt}",
                dataset_type=cfg.data.dataset, dataset_name=f"{dataset}, test split", dataset_split="test",
                metric_type=metric, metric_name=name, metric_value=report[metric],
                metric_config=report[f"{metric}_signature"]))
    data = ModelCardData(language=[src, tgt], license="unknown", library_name="transformers",
                         pipeline_tag="translation", tags=["translation", "nmt"],
                         datasets=["custom" if custom else cfg.data.dataset], model_name=cfg.name,
                         eval_results=results or None, **extra)
    m = cfg.model
    lines = [
        f"# {cfg.name}", "",
        f"A Transformer translating {src}->{tgt}, trained with nmt on {dataset}, converted to "
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
        "", "## Use", "",
        f"With transformers {transformers_version} (which wrote this folder; its stock classes, no custom code):", "",
        "```python", "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer", "",
        'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_REPO")',
        'model = AutoModelForSeq2SeqLM.from_pretrained("PATH_OR_REPO")',
        'batch = tokenizer(["Ein Mann fährt Fahrrad."], return_tensors="pt", padding=True)',
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))", "```", "",
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
        with quiet(transformers):
            hf.save_pretrained(str(tmp))
            _write_tokenizer(transformers, loaded.tokenizer, tmp, loaded.cfg.model.max_positions - 1,
                             loaded.cfg.data.languages)
        (tmp / "README.md").write_text(model_card(loaded, kind, _test_report(loaded), transformers.__version__),
                                       encoding="utf-8")

    head = {"format": "huggingface", "format_version": FORMAT_VERSION, "class": CLASSES[kind],
            "transformers_version": transformers.__version__}
    return publish_export(output, loaded, MANIFEST, head, fill)
