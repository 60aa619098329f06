"""Hugging Face interop, checked against transformers itself: exports load offline with the stock classes and
score and decode like nmt; a transformers-made MarianMTModel imports and scores and decodes like transformers;
import(export(model)) decodes exactly like the model; bad input is refused in one line. The model settings the
import needs (model.activation, model.output_bias, id tables in the tokenizer) are checked without transformers."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
import yaml

from nmt.checkpoint import load_checkpoint, load_model
from nmt.cli import export_main, import_main, train_main
from nmt.config import ModelConfig, decode_with
from nmt.data import collate, read_pair
from nmt.fileio import sha256_file
from nmt.loader import load_translator
from nmt.models.transformer import Transformer
from nmt.search import max_lengths
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, VocabInfo
from tests.conftest import REPO, SHARED, tiny_config, untrained_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub: every folder is local
CPU = torch.device("cpu")
SAMPLE = REPO / "data" / "sample"
needs_transformers = pytest.mark.skipif(find_spec("transformers") is None, reason="the hf extra is not installed")


def _has_translation_pipeline() -> bool:
    try:
        from transformers.pipelines import SUPPORTED_TASKS
    except ImportError:
        return False
    return "translation" in SUPPORTED_TASKS


# ---------------------------------------------------------------------------------------------- model settings


@pytest.mark.parametrize(("name", "function"), [("relu", torch.relu), ("gelu", torch.nn.functional.gelu),
                                                ("swish", torch.nn.functional.silu)])
def test_model_activation_is_the_feed_forward_nonlinearity(name, function):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=8, heads=2, ffn_dim=16, encoder_layers=1, decoder_layers=1,
                                    activation=name), VocabInfo(20, 20, True))
    ffn = model.encoder_layers[0].ffn
    x = torch.randn(3, 8)
    assert torch.allclose(ffn(x), ffn[2](function(ffn[0](x))), atol=1e-6)


def test_output_bias_is_off_by_default_and_adds_to_every_logit_when_on():
    vocab, settings = VocabInfo(20, 20, True), dict(d_model=8, heads=2, ffn_dim=16, encoder_layers=1, decoder_layers=1)
    assert "output.bias" not in Transformer(ModelConfig(**settings), vocab).state_dict()  # old checkpoints load
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**settings, output_bias=True), vocab).eval()
    src, tgt_in = torch.randint(4, 20, (2, 5)), torch.randint(4, 20, (2, 4))
    mask = torch.ones(2, 5, dtype=torch.bool)
    before = model(src, mask, tgt_in)  # (B, T, V)
    with torch.no_grad():
        model.output.bias.copy_(torch.linspace(-1, 1, 20))
    assert torch.allclose(model(src, mask, tgt_in) - before, torch.linspace(-1, 1, 20).expand_as(before), atol=1e-6)


def _spm(lines: list[str], size: int) -> bytes:
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=writer, vocab_size=size,
                                   model_type="unigram", minloglevel=2, num_threads=1)
    return writer.getvalue()


@pytest.fixture(scope="module")
def sample_spms() -> tuple[bytes, bytes]:
    """Separate German and English sentencepiece models of the sample's training text."""
    return (_spm((SAMPLE / "train.de").read_text(encoding="utf-8").splitlines(), 150),
            _spm((SAMPLE / "train.en").read_text(encoding="utf-8").splitlines(), 150))


def _marian_table(protos: tuple[bytes, bytes]) -> list[str]:
    """Marian's layout of one vocabulary for two sentencepiece models: </s> 0, <unk> 1, the pieces, <pad> last."""
    pieces = set()
    for proto in protos:
        model = spm.SentencePieceProcessor(model_proto=proto)
        pieces |= {model.id_to_piece(i) for i in range(model.get_piece_size())
                   if not (model.is_control(i) or model.is_unknown(i))}
    return ["</s>", "<unk>", *sorted(pieces), "<pad>"]


def test_id_table_tokenizer_numbers_pieces_by_the_table_and_keeps_it_through_saving(sample_spms, tmp_path):
    german, english = sample_spms
    table = ["<pad>", "<unk>", "<s>", "</s>", *_marian_table(sample_spms)[2:-1]]
    tok = Tokenizer(german, english, [table])
    assert tok.joint and tok.vocab.src_size == tok.vocab.tgt_size == len(table)
    line = "Ein Mann läuft."
    pieces = spm.SentencePieceProcessor(model_proto=german).encode(line, out_type=str)
    assert tok.encode_src([line])[0] == [table.index(p) for p in pieces]
    assert tok.encode_src(["Ω"])[0][-1] == UNK_ID  # a piece outside the table
    assert tok.detokenize([BOS_ID, *tok.encode_tgt(["A man runs."])[0], EOS_ID, PAD_ID]) == "A man runs."
    again = Tokenizer.from_bytes(tok.to_bytes())
    tok.save(tmp_path)
    for copy in (again, Tokenizer.load(tmp_path)):
        assert copy.identity == tok.identity and copy.tables == [table]
    assert Tokenizer(german, english).identity != tok.identity  # the same models without the table differ
    with pytest.raises(ValueError, match="twice"):
        Tokenizer(german, english, [table + ["<unk>"]])


# ---------------------------------------------------------------------------------------------- export


def _test_split() -> tuple[list[str], list[str]]:
    return read_pair(SAMPLE / "test.de", SAMPLE / "test.en")


@pytest.fixture(scope="module")
def post_norm_run(tmp_path_factory) -> Path:
    """A tiny post-norm Transformer trained as briefly as `trained_run`."""
    folder = tmp_path_factory.mktemp("postnorm")
    assert train_main([str(tiny_config(folder, name="post", model={"pre_norm": False}, train=SHARED["train"]))]) == 0
    return folder / "runs" / "post"


@pytest.fixture(scope="module")
def exports(trained_run, post_norm_run, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """norm -> (run folder, its export by nmt-export --format huggingface)."""
    folder = tmp_path_factory.mktemp("hf_exports")
    out = {}
    for norm, run in (("pre", trained_run), ("post", post_norm_run)):
        assert export_main([str(run), "--format", "huggingface", "--output", str(folder / norm)]) == 0
        out[norm] = (run, folder / norm)
    return out


def _hf(folder: Path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder)), AutoModelForSeq2SeqLM.from_pretrained(str(folder)).eval()


def _caps(translator, sources: list[np.ndarray]) -> list[int]:
    """nmt's cap on output tokens before EOS of each source (max_lengths), as transformers' max_new_tokens + 1."""
    d = translator.decode
    lengths = torch.tensor([len(ids) + 1 for ids in sources])  # EOS included, as the model reads them
    mask = torch.arange(int(lengths.max()))[None] < lengths[:, None]
    return max_lengths(mask, d.max_len_a, d.max_len_b, translator.engine.max_positions).tolist()


def _generate(hf, tokenizer, lines: list[str], caps: list[int], **search) -> list[list[int]]:
    """transformers' output ids of each line (after the decoder start, up to its EOS) under nmt's per-sentence
    length cap: at the cap, EOS (the export's forced_eos_token_id, as nmt forces it)."""
    if search.get("num_beams", 1) == 1:
        return _greedy(hf, tokenizer, lines, caps, **search)
    out: list[list[int]] = [[] for _ in lines]
    eos = hf.generation_config.eos_token_id
    for cap in sorted(set(caps)):  # the cap changes a beam search: the lines of one cap form one batch
        rows = [i for i, c in enumerate(caps) if c == cap]
        batch = tokenizer([lines[i] for i in rows], return_tensors="pt", padding=True)
        ids = hf.generate(**batch, max_new_tokens=cap + 1, max_length=None, do_sample=False, **search)
        for row, sequence in zip(rows, ids.tolist(), strict=True):
            tokens = sequence[1:]
            out[row] = tokens[:tokens.index(eos) + 1] if eos in tokens else tokens
    return out


def _greedy(hf, tokenizer, lines: list[str], caps: list[int], **search) -> list[list[int]]:
    """Greedy search in one batch up to the longest cap: a greedy token never depends on the cap, so each line's
    output is cut at its own cap and ends in the EOS that transformers forces there."""
    eos = hf.generation_config.eos_token_id
    assert hf.generation_config.forced_eos_token_id == eos
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    ids = hf.generate(**batch, max_new_tokens=max(caps) + 1, max_length=None, do_sample=False, **search)
    out = []
    for cap, sequence in zip(caps, ids.tolist(), strict=True):
        tokens = sequence[1:cap + 1]  # at most cap tokens before the EOS
        out.append(tokens[:tokens.index(eos) + 1] if eos in tokens else [*tokens, eos])
    return out


@needs_transformers
@pytest.mark.parametrize(("norm", "stock_class"), [("pre", "PegasusForConditionalGeneration"),
                                                   ("post", "MarianMTModel")])
def test_export_loads_offline_with_stock_classes_and_scores_and_decodes_like_nmt(exports, norm, stock_class):
    run, folder = exports[norm]
    tokenizer, hf = _hf(folder)
    assert type(hf).__name__ == stock_class and type(tokenizer).__name__ == "MarianTokenizer"
    translator = load_translator([run], CPU)
    sources, references = _test_split()
    ours = translator.encode(sources)
    theirs = tokenizer(sources).input_ids
    assert [list(map(int, ids)) + [EOS_ID] for ids in ours] == theirs
    targets = translator.tokenizer.encode_tgt(references)
    batch = collate([(s, np.asarray(t, dtype=np.int64)) for s, t in zip(ours, targets)], PAD_ID)
    model = load_model(run, CPU).model
    with torch.inference_mode():
        mine = model(batch.src, batch.src_mask, batch.tgt_in).log_softmax(-1)  # (B, T, V)
        hf_logits = hf(input_ids=batch.src, attention_mask=batch.src_mask.long(), decoder_input_ids=batch.tgt_in).logits
    real = batch.tgt_out != PAD_ID
    gold = batch.tgt_out[:, :, None]
    difference = (mine.gather(2, gold) - hf_logits.log_softmax(-1).gather(2, gold))[:, :, 0][real]
    assert difference.abs().max() < 1e-4
    greedy = translator.with_decode(decode_with(translator.decode, {"beam": 1}))
    mine = [hyps[0].tokens + [EOS_ID] for hyps in greedy.hypotheses(sources)]
    theirs = _generate(hf, tokenizer, sources, _caps(greedy, ours), num_beams=1)
    assert sum(a == b for a, b in zip(mine, theirs, strict=True)) >= 0.99 * len(sources)


@needs_transformers
def test_pipeline_translation_translates_with_the_export_where_transformers_has_it(exports):
    if not _has_translation_pipeline():  # asked here, not at collection: the pipelines import takes seconds
        pytest.skip("transformers 5 removed pipeline('translation') (PR #43256); the tokenizer and generate() "
                    "are tested")
    from transformers import pipeline

    for _, folder in exports.values():
        sources = _test_split()[0][:8]
        tokenizer, hf = _hf(folder)
        batch = tokenizer(sources, return_tensors="pt", padding=True)
        expected = tokenizer.batch_decode(hf.generate(**batch, num_beams=1), skip_special_tokens=True)
        translated = pipeline("translation", model=str(folder))(sources, num_beams=1)
        assert [row["translation_text"] for row in translated] == expected and any(expected)


@needs_transformers
def test_the_card_s_usage_snippet_runs_with_the_transformers_that_wrote_it(exports):
    """The card's Python block, run as written (the folder for PATH_OR_REPO), translates as generate() does."""
    import transformers

    _, folder = exports["pre"]
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"transformers {transformers.__version__}" in card
    (snippet,) = re.findall(r"^```python\n(.*?)^```", card, flags=re.S | re.M)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(snippet.replace("PATH_OR_REPO", str(folder)), {})  # noqa: S102 - the card's own code is the subject
    tokenizer, hf = _hf(folder)
    batch = tokenizer(["Ein Mann fährt Fahrrad."], return_tensors="pt", padding=True)
    assert printed.getvalue().strip() == str(tokenizer.batch_decode(hf.generate(**batch), skip_special_tokens=True))


@needs_transformers
def test_the_card_of_a_custom_corpus_says_custom_and_names_its_files(trained_run):
    from huggingface_hub import ModelCard

    from nmt.interop.hf_export import model_card

    loaded = load_model(trained_run, CPU)
    loaded.cfg = replace(loaded.cfg, data=replace(loaded.cfg.data, dataset="files", train_src="/x/corpus/train.de",
                                                  train_tgt="/x/corpus/train.en", val_src="/x/val.de",
                                                  val_tgt="/x/val.en", train_corpora=[["/y/more.tsv"]]))
    card = ModelCard(model_card(loaded, "pegasus", None, "5.0"))
    assert card.data.datasets == ["custom"]
    assert card.data.to_dict()["training_files"] == ["train.de", "train.en", "val.de", "val.en", "more.tsv"]
    assert "/x/" not in str(card) and "custom parallel files (train.de" in card.text


@needs_transformers
def test_beam_search_at_length_penalty_0_agrees_but_where_the_cap_forces_eos(exports):
    """The one search rule that differs at alpha 0: at the length cap transformers forces EOS at log-probability 0
    (its scores come after its logits processors), nmt at the model's own EOS log-probability; so a difference
    may only come where one of the two outputs reaches the cap."""
    for run, folder in exports.values():
        tokenizer, hf = _hf(folder)
        translator = load_translator([run], CPU)
        beam = translator.with_decode(decode_with(translator.decode, {"beam": 4, "length_penalty": 0.0}))
        sources = _test_split()[0][:40]
        caps = _caps(beam, translator.encode(sources))
        outputs = _generate(hf, tokenizer, sources, caps, num_beams=4, length_penalty=0.0, early_stopping=True)
        for line, cap, hyps, out in zip(sources, caps, beam.hypotheses(sources), outputs, strict=True):
            theirs = out[:-1] if out[-1:] == [EOS_ID] else out
            assert theirs == hyps[0].tokens or cap in (len(theirs), len(hyps[0].tokens)), line


@needs_transformers
def test_export_card_is_hub_metadata_with_the_run_s_test_scores_and_signatures(exports):
    from huggingface_hub import ModelCard

    run, folder = exports["pre"]
    report = json.loads((run / "eval_test.json").read_text(encoding="utf-8"))
    card = ModelCard.load(folder / "README.md")
    assert card.data.language == ["de", "en"] and card.data.pipeline_tag == "translation"
    assert card.data.license == "unknown" and "license" in card.text  # left for the user, and the text says so
    scores = {r.metric_type: r for r in card.data.eval_results}
    for metric in ("bleu", "chrf"):
        assert scores[metric].metric_value == report["scores"][metric]
        assert report["scores"][f"{metric}_signature"] in card.text
    manifest = json.loads((folder / "nmt_huggingface.json").read_text(encoding="utf-8"))
    assert manifest["source_sha256"] == sha256_file(manifest["source_checkpoint"])
    assert all(sha256_file(folder / name) == digest for name, digest in manifest["files"].items())
    generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    assert (generation["decoder_start_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == \
        (BOS_ID, EOS_ID, PAD_ID)
    assert generation["num_beams"] == report["decode"]["beam"]


def test_gru_export_is_refused_in_one_line(tmp_path, capsys):
    run = untrained_run(tmp_path, "gru", arch="rnn")
    assert export_main([str(run), "--format", "huggingface", "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GRU" in err and "Transformer" in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- import


@pytest.fixture(scope="module")
def marian_folder(sample_spms, tmp_path_factory) -> Path:
    """A random MarianMTModel made by transformers in OPUS-MT's layout: swish, separate German and English
    sentencepiece models sharing one vocab.json, </s> 0, <unk> 1, <pad> last and also the decoder start, and a
    non-zero final_logits_bias."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    folder = tmp_path_factory.mktemp("opus_mt_like")
    raw = tmp_path_factory.mktemp("opus_mt_files")
    table = _marian_table(sample_spms)
    for name, proto in zip(("source.spm", "target.spm"), sample_spms, strict=True):
        (raw / name).write_bytes(proto)
    (raw / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(table)}), encoding="utf-8")
    pad = len(table) - 1
    config = MarianConfig(vocab_size=len(table), decoder_vocab_size=len(table), d_model=32, encoder_layers=2,
                          decoder_layers=2, encoder_ffn_dim=48, decoder_ffn_dim=48, encoder_attention_heads=4,
                          decoder_attention_heads=4, activation_function="swish", scale_embedding=True,
                          max_position_embeddings=256, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
                          init_std=0.2)  # wide weights: clear argmaxes, no near-ties between implementations
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
    model.generation_config = GenerationConfig(decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad,
                                               forced_eos_token_id=0, num_beams=4, max_length=64)
    model.save_pretrained(str(folder))
    MarianTokenizer(str(raw / "source.spm"), str(raw / "target.spm"), str(raw / "vocab.json"),
                    source_lang="de", target_lang="en").save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def imported(marian_folder, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("imported") / "opus.pt"
    assert import_main([str(marian_folder), "--output", str(path)]) == 0
    return path


@needs_transformers
def test_transformers_made_marian_imports_and_scores_and_decodes_like_transformers(marian_folder, imported):
    from transformers import MarianMTModel, MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(str(marian_folder))
    hf = MarianMTModel.from_pretrained(str(marian_folder)).eval()
    loaded = load_model(imported, CPU)
    assert (loaded.cfg.model.activation, loaded.cfg.model.pre_norm, loaded.cfg.model.output_bias) == ("swish", False,
                                                                                                     True)
    table = loaded.tokenizer.tables[0]
    hf_id = {piece: i for i, piece in enumerate(table)}
    ours_of = {tokenizer.encoder[piece]: i for piece, i in hf_id.items() if piece in tokenizer.encoder}
    assert ours_of[hf.config.decoder_start_token_id] == BOS_ID  # Marian's <pad> starts the decoder: our BOS
    sources, references = _test_split()
    translator = load_translator([imported], CPU)
    encoded = translator.encode(sources)
    assert [[ours_of[i] for i in ids] for ids in tokenizer(sources).input_ids] == \
        [list(map(int, ids)) + [EOS_ID] for ids in encoded]
    for line, reference in zip(sources[:20], references[:20]):
        inputs = tokenizer([line], text_target=[reference], return_tensors="pt")
        gold = inputs.pop("labels")[0]  # (T,) ending with EOS
        start = torch.tensor([[hf.config.decoder_start_token_id, *gold[:-1].tolist()]])
        with torch.inference_mode():
            theirs = hf(**inputs, decoder_input_ids=start).logits.log_softmax(-1)[0]  # (T, V)
            src = torch.tensor([[ours_of[i] for i in inputs.input_ids[0].tolist()]])
            tgt_in = torch.tensor([[ours_of[i] for i in start[0].tolist()]])
            mine = loaded.model(src, torch.ones_like(src, dtype=torch.bool), tgt_in).log_softmax(-1)[0]
        picked = mine[torch.arange(len(gold)), [ours_of[i] for i in gold.tolist()]]
        assert torch.allclose(picked, theirs[torch.arange(len(gold)), gold], atol=1e-4)
        assert mine[:, PAD_ID].exp().max() == 0  # the added padding row takes no probability
    greedy = translator.with_decode(decode_with(translator.decode, {"beam": 1}))
    mine = [hyps[0].tokens + [EOS_ID] for hyps in greedy.hypotheses(sources)]
    theirs = [[ours_of[i] for i in out] for out in _generate(hf, tokenizer, sources, _caps(greedy, encoded),
                                                               num_beams=1)]
    assert sum(a == b for a, b in zip(mine, theirs, strict=True)) >= 0.99 * len(sources)


@needs_transformers
def test_import_records_the_source_folder_s_files_and_config(marian_folder, imported):
    record = load_checkpoint(imported)["progress"]["imported"]
    assert record["files"] == {p.name: sha256_file(p) for p in marian_folder.iterdir() if p.is_file()}
    assert record["config"] == json.loads((marian_folder / "config.json").read_text(encoding="utf-8"))
    assert record["added_padding_row"]  # Marian's pad is its decoder start


@needs_transformers
def test_imported_model_fine_tunes_with_train_init_from(imported, tmp_path):
    raw = yaml.safe_load(tiny_config(tmp_path, name="child").read_text(encoding="utf-8"))
    del raw["model"], raw["tokenizer"]
    raw["train"].update(init_from=str(imported), max_steps=20, eval_every=10, lr=1e-3, warmup=5)
    raw["data"]["max_tokens"] = 100
    config = tmp_path / "child.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert train_main([str(config)]) == 0
    parent, child = load_model(imported, CPU), load_model(tmp_path / "runs" / "child", CPU)
    assert child.tokenizer.identity == parent.tokenizer.identity
    sources, references = read_pair(SAMPLE / "val.de", SAMPLE / "val.en")
    pairs = [(np.asarray(s, dtype=np.int64), np.asarray(t, dtype=np.int64)) for s, t in
             zip(parent.tokenizer.encode_src(sources), parent.tokenizer.encode_tgt(references))]
    batch = collate(pairs, PAD_ID)

    def nll(model: torch.nn.Module) -> float:
        with torch.inference_mode():
            logp = model(batch.src, batch.src_mask, batch.tgt_in).log_softmax(-1)  # (B, T, V)
        return -logp.gather(2, batch.tgt_out[:, :, None])[:, :, 0][batch.tgt_out != PAD_ID].mean().item()

    assert nll(child.model) < nll(parent.model)  # the random parent learns the sample


@needs_transformers
@pytest.mark.parametrize("model", [{"pre_norm": True}, {"pre_norm": False, "tie_embeddings": False},
                                   {"pre_norm": True, "positions": "learned", "activation": "gelu"}],
                         ids=["pegasus", "marian-untied", "blenderbot"])
def test_import_of_an_export_decodes_exactly_like_the_model(tmp_path, model):
    run = untrained_run(tmp_path, "roundtrip", model=model)
    assert export_main([str(run), "--format", "huggingface", "--output", str(tmp_path / "hf")]) == 0
    assert import_main([str(tmp_path / "hf"), "--output", str(tmp_path / "back.pt")]) == 0
    sources, _ = _test_split()
    before = load_translator([run], CPU).hypotheses(sources)
    after = load_translator([tmp_path / "back.pt"], CPU).hypotheses(sources)
    assert [[(h.tokens, h.score) for h in hyps] for hyps in after] == \
        [[(h.tokens, pytest.approx(h.score, abs=1e-4)) for h in hyps] for hyps in before]


def _break(folder: Path, how: str) -> None:
    if how == "no config.json":
        (folder / "config.json").unlink()
    elif how == "config.json not JSON":
        (folder / "config.json").write_text("{not json", encoding="utf-8")
    elif how == "a BERT":
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}), encoding="utf-8")
    elif how == "no vocab.json":
        (folder / "vocab.json").unlink()
    elif how == "vocab.json with a gap":
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        vocab["</s>"] = len(vocab) + 5
        (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    elif how == "truncated weights":
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    elif how == "relu6 activation":
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        (folder / "config.json").write_text(json.dumps({**config, "activation_function": "relu6"}), encoding="utf-8")


@needs_transformers
@pytest.mark.parametrize("how", ["no config.json", "config.json not JSON", "a BERT", "no vocab.json",
                                 "vocab.json with a gap", "truncated weights", "relu6 activation"])
def test_malformed_folder_is_refused_in_one_line(marian_folder, tmp_path, capsys, how):
    folder = tmp_path / "broken"
    shutil.copytree(marian_folder, folder)
    _break(folder, how)
    assert import_main([str(folder), "--output", str(tmp_path / "out.pt")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert not (tmp_path / "out.pt").exists()


def test_sinusoid_layouts_differ_by_the_channel_order():
    """Marian's table (numpy, sines then cosines) is ours with its channels in `channel_order`."""
    from nmt.interop.hf_weights import channel_order
    from nmt.models.transformer import sinusoidal_table

    length, dim = 64, 12
    position = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(length)])
    marian = np.concatenate([np.sin(position[:, 0::2]), np.cos(position[:, 1::2])], axis=1)
    ours = sinusoidal_table(length, dim)[:, channel_order(dim)].numpy()
    assert np.abs(ours - marian).max() < 1e-5 * math.sqrt(length)
