"""Benchmarks: analytic FLOP counts against torch's counter, and each benchmark module end to end on tiny settings."""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nmt.config import DecodeConfig, ModelConfig, load_config
from nmt.flops import decoding_flops, forward_flops, linear_flops, training_flops
from nmt.models import build_model
from nmt.processes import descendants
from nmt.search import greedy_search
from nmt.tokenizer import VocabInfo
from nmt.translator import Translator
from tests.conftest import REPO, tiny_config, untrained_run
from tests.synthetic_archive import archive_folder

VOCAB = VocabInfo(src_size=50, tgt_size=50, joint=True)
TINY = {"d_model": 16, "heads": 2, "ffn_dim": 32, "emb_dim": 16, "hidden_size": 16, "dropout": 0.0}
COUNTED = [
    {"arch": "transformer"},
    {"arch": "transformer", "self_attention": "local", "encoder_layers": 1, "decoder_layers": 2},
    {"arch": "rnn"},
    {"arch": "rnn", "attention": "dot", "input_feeding": False},
    {"arch": "rnn", "attention": "general", "encoder_layers": 2, "decoder_layers": 3},
    {"arch": "rnn", "attention": "none"},
]


@pytest.fixture(autouse=True, scope="module")
def keep_threads() -> Iterator[None]:
    """The benchmarks set torch's thread count for the whole process; later tests get theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def scripts() -> dict[str, ModuleType]:
    """The benchmark modules (benchmarks/) and the table writers (tools/), by name."""
    names = ("train", "decode", "attention", "run_all", "peers", "profile_step", "decode_profile")
    return {**{name: importlib.import_module(f"benchmarks.{name}") for name in names},
            **{name: importlib.import_module(f"tools.{name}") for name in ("results_table", "compare_table")}}


def test_linear_layer_costs_two_flops_per_weight_and_token():
    layer = torch.nn.Linear(12, 7)
    with FlopCounterMode(display=False) as counter:
        layer(torch.randn(5, 12))
    assert linear_flops(5, 12, 7) == 2 * 5 * 12 * 7 == counter.get_total_flops()


@pytest.mark.parametrize("overrides", COUNTED, ids=lambda o: "-".join(map(str, o.values())))
def test_forward_flops_equal_torch_count_of_one_sentence(overrides):
    """Without padding, the analytic count equals torch's matmul count (math attention, so it is visible)."""
    cfg = ModelConfig(**{**TINY, **overrides})
    model = build_model(cfg, VOCAB).eval()
    src, tgt = torch.randint(4, 50, (1, 9)), torch.randint(4, 50, (1, 6))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(src, torch.ones_like(src, dtype=torch.bool), tgt)
    assert forward_flops(cfg, VOCAB.tgt_size, 9, 6) == counter.get_total_flops()


@pytest.mark.parametrize("overrides", [*COUNTED, {"arch": "transformer", "self_attention": "linear"}],
                         ids=lambda o: "-".join(map(str, o.values())))
def test_decoding_flops_equal_torch_count_of_a_greedy_search(overrides):
    """One sentence, one row: the encoder once, then each step's decoder over the keys cached so far."""
    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY, **overrides})
    model = build_model(cfg, VOCAB).eval()
    src = torch.randint(4, 50, (1, 9))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        (hyp,) = greedy_search(model, src, torch.ones_like(src, dtype=torch.bool),
                               DecodeConfig(beam=1, max_len_a=1.0, max_len_b=5))
    steps = len(hyp.tokens) + 1
    assert steps > 9  # past the local variant's window (8 on each side): its cache then stops growing
    assert decoding_flops(cfg, VOCAB.tgt_size, 9, steps) == counter.get_total_flops()
    per_row = decoding_flops(cfg, VOCAB.tgt_size, 9, steps) - decoding_flops(cfg, VOCAB.tgt_size, 9, 0)
    assert decoding_flops(cfg, VOCAB.tgt_size, 9, steps, rows=5) == pytest.approx(
        decoding_flops(cfg, VOCAB.tgt_size, 9, 0) + 5 * per_row)


def test_training_is_three_forwards_summed_over_pairs():
    cfg = ModelConfig(**TINY)
    expected = 3 * (forward_flops(cfg, 50, 4, 5) + forward_flops(cfg, 50, 7, 3))
    assert training_flops(cfg, 50, [4, 7], [5, 3]) == pytest.approx(expected)


def test_forward_flops_of_the_multi30k_transformer_equal_torch_count():
    """The shipped config (pre-norm, tied embeddings over a joint 8k vocabulary, 3+3 layers) is counted as torch
    counts it, not only the tiny ones."""
    cfg = load_config(REPO / "configs" / "multi30k_transformer.yaml")
    vocab = VocabInfo(src_size=cfg.tokenizer.vocab_size, tgt_size=cfg.tokenizer.vocab_size, joint=True)
    model = build_model(cfg.model, vocab).eval()
    src, tgt = torch.randint(4, 8000, (1, 16)), torch.randint(4, 8000, (1, 16))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(src, torch.ones_like(src, dtype=torch.bool), tgt)
    assert forward_flops(cfg.model, vocab.tgt_size, 16, 16) == counter.get_total_flops()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny config on the sample corpus and an (untrained) run folder with a checkpoint."""
    folder = tmp_path_factory.mktemp("bench")
    run = untrained_run(folder, "benchtiny", train={"batch_tokens": 256})
    return folder / "benchtiny.yaml", run


def test_bench_train_writes_its_figures(scripts, tiny_run, tmp_path):
    config, _ = tiny_run
    args = [str(config), "--seconds", "0.3", "--warmup-steps", "1", "--threads", "1", "--matmul-size", "64",
            "--peak-seconds", "0.05", "--out-dir", str(tmp_path)]
    assert scripts["train"].main(args) == 0
    written, = tmp_path.glob("train_benchtiny_*.json")  # named by the device the test config trains on
    result = json.loads(written.read_text())
    assert result["steps"] >= 1 and result["tgt_tokens_per_s"] > 0 and result["src_tokens_per_s"] > 0
    assert 0 <= result["padding_share"] < 1 and result["peak_rss_mb"] > 0 and result["mfu"] > 0
    assert set(result["matmul_peak_tflops"]) == {"fp32", "bf16"}
    assert result["command"].startswith("python -m benchmarks.train ") and result["machine"]["torch"]


PEER_SUMMARY = """== fairseq 0.12.2  (log: /x/fairseq.train.log)
   exit 124 (124 = stopped by timeout as intended), wall 0:01.00
   target tok/s after step 25: mean 1500  (aggregate 1490, +-1 s log rounding; min 1400, max 1600)  [wps]
   peak RSS: 1.87 GB (1873580 kB)
== OpenNMT-py 3.5.1  (log: /x/opennmt.train.log)
   exit 124 (124 = stopped by timeout as intended), wall 0:01.00
   target tok/s after step 25: mean 2000  (aggregate 1990, +-1 s log rounding; min 1900, max 2100)  [tgt]
   peak RSS: 3.36 GB (3364640 kB)
== OpenNMT-py / fairseq target tok/s (means): 1.33
"""


def test_bench_peers_pairs_one_run_of_each(scripts, tiny_run, tmp_path):
    """Our run and the kit's run land in one JSON, the ratio taken against the faster peer of that run."""
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "bench_train.sh").write_text(f'mkdir -p "$BENCH_DIR"\ncat > "$BENCH_DIR/summary.txt" <<\'EOF\'\n'
                                        f'{PEER_SUMMARY}EOF\n')
    config, _ = tiny_run
    out = tmp_path / "results"
    args = [str(config), "--seconds", "0.3", "--kit", str(kit), "--out-dir", str(out)] + [
        f"--train-arg={a}" for a in ("--warmup-steps=1", "--threads=1", "--matmul-size=64", "--peak-seconds=0.05")]
    assert scripts["peers"].main(args) == 0
    written, = out.glob("peers_benchtiny_cpu.json")
    result = json.loads(written.read_text())
    assert result["fastest_peer"] == "opennmt" and result["peers"]["fairseq"]["peak_rss_mb"] == 1829.7
    assert result["ratio_to_fastest"] == pytest.approx(result["nmt"]["tgt_tokens_per_s"] / 2000, abs=1e-3)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench:start -->\n<!-- bench:end -->\n")
    assert scripts["run_all"].main(["--report-only", "--results", str(out), "--readme", str(readme)]) == 0
    assert "| benchtiny | 0.3 |" in readme.read_text() and "| 1,500 | 2,000 |" in readme.read_text()
    assert scripts["peers"].parse_summary(PEER_SUMMARY.split("== OpenNMT")[0]).keys() == {"fairseq"}
    assert scripts["peers"].main(["--kit", str(tmp_path / "none")]) == 2


GENERATE_LOG = "2026-12-01 | INFO | fairseq_cli.generate | Translated 1,000 sentences (13,614 tokens) in 8.6s " \
               "(116.43 sentences/s, {rate} tokens/s)\n"
SACREBLEU = '[\n{{\n "name": "BLEU",\n "score": {bleu},\n "signature": "nrefs:1"\n}},\n{{\n "name": "chrF2",\n' \
            ' "score": 55.1\n}}\n]\n'


def test_bench_peers_pairs_decoding_with_fairseq_generate(scripts, tiny_run, tmp_path, monkeypatch):
    """Our decoding and fairseq-generate's (a stand-in kit here) land in one JSON with their ratios."""
    _, run = tiny_run
    peers = tmp_path / "peers"
    logs = peers / "fairseq" / "logs"
    (peers / "fairseq" / "ckpt").mkdir(parents=True)
    (peers / "fairseq" / "ckpt" / "checkpoint_last.pt").write_bytes(b"fairseq")
    kit = tmp_path / "kit"
    (kit / "fairseq").mkdir(parents=True)
    lines = [f'mkdir -p "{logs}"']
    for beam, rate, bleu in ((5, "1585.15", 31.2), (1, "3170.30", 29.9)):
        lines += [f"echo '{GENERATE_LOG.format(rate=rate).strip()}' > \"{logs}/decode.beam{beam}.log\"",
                  f"cat >> \"{logs}/results.txt\" <<'EOF'\n== fairseq beam={beam} ckpt=$1 lines=1000\n"
                  f"{SACREBLEU.format(bleu=bleu)}EOF"]
    (kit / "fairseq" / "decode.sh").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("PEERS", str(peers))
    out = tmp_path / "results"
    quick = [f"--decode-arg={a}" for a in ("--limit=1", "--batched-limit=3", "--threads=1")]
    assert scripts["peers"].main(["--decode", str(run), "--kit", str(kit), "--out-dir", str(out), *quick]) == 0
    result = json.loads((out / "peers_decode_benchtiny_cpu.json").read_text())
    assert result["fairseq"]["beam5"]["bleu"] == 31.2 and result["fairseq"]["greedy"]["bleu"] == 29.9
    assert result["fairseq"]["greedy"]["sentences_per_s"] == 116.43
    for search in ("greedy", "beam5"):
        expected = result["nmt"][search]["sentences_per_s"] / result["fairseq"][search]["sentences_per_s"]
        assert result["ratio"][search] == pytest.approx(expected, abs=1e-3)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench:start -->\n<!-- bench:end -->\n")
    assert scripts["run_all"].main(["--report-only", "--results", str(out), "--readme", str(readme)]) == 0
    assert "| benchtiny | beam5 |" in readme.read_text() and "| 116.4 | 31.20 |" in readme.read_text()
    ours, peak = result["nmt"]["greedy"], result["nmt"]["matmul_peak_tflops"]["fp32"]
    assert ours["mfu"] == pytest.approx(ours["model_gflops_per_s"] / 1e3 / peak, abs=1e-5)  # FLOP/s over the peak
    assert f"| {100 * ours['mfu']:.1f}% |" in readme.read_text() and "matmul peak measured" in readme.read_text()
    monkeypatch.setenv("PEERS", str(tmp_path / "nowhere"))
    assert scripts["peers"].main(["--decode", str(run), "--kit", str(kit)]) == 2


def test_profile_step_sorts_operator_times_into_kinds(scripts, tiny_run, tmp_path):
    """The JSON holds a non-negative time per kind (the overhead is the rest of the step, so the parts sum to
    the profiled time by construction: that is not tested here), and operators land in the right kind."""
    config, _ = tiny_run
    args = [str(config), "--steps", "2", "--warmup-steps", "1", "--threads", "1", "--out-dir", str(tmp_path)]
    assert scripts["profile_step"].main(args) == 0
    result = json.loads((tmp_path / "profile_benchtiny_cpu.json").read_text())
    parts = result["breakdown"]
    assert parts["matmul"] > 0 and parts["optimizer"] > 0 and parts["softmax and loss"] > 0
    assert min(parts.values()) >= 0
    assert scripts["profile_step"].category("aten::addmm") == "matmul"
    assert scripts["profile_step"].category("aten::_foreach_mul_") == "optimizer"
    assert scripts["profile_step"].category("aten::_log_softmax") == "softmax and loss"
    assert scripts["profile_step"].category("Some label") is None
    assert scripts["profile_step"].category("_Dropout/aten::where") == "dropout"
    assert scripts["profile_step"].category("_SmoothedCrossEntropyBackward/aten::mul") == "softmax and loss"


def test_decode_profile_sorts_top_level_operators_into_parts(scripts):
    part_of = scripts["decode_profile"].part_of
    assert part_of("aten::addmm") == part_of("aten::linear") == "matmuls"
    assert part_of("aten::add") == part_of("aten::masked_fill") == "element-wise arithmetic"  # not a matmul
    assert part_of("aten::scaled_dot_product_attention") == "attention kernel"
    assert part_of("aten::index_select") == part_of("aten::cat") == "rows and caches"
    assert part_of("aten::topk") == part_of("aten::amax") == "choosing tokens"
    assert part_of("aten::nonzero") == "other operators"


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_decoding_ceiling_never_ends_after_the_best_schedule_of_whole_batches(scripts, workers):
    """Every assignment of batches to workers tried: the floor is at most the best makespan, and equal batches
    (the busiest worker runs ceil(n / W) of them) reach it."""
    floor = scripts["decode_profile"].makespan_floor
    rng = random.Random(workers)
    for _ in range(40):
        times = [rng.uniform(0.1, 2.0) for _ in range(rng.randint(1, 7))]
        best = min(max(sum(t for t, w in zip(times, owners, strict=True) if w == worker) for worker in range(workers))
                   for owners in itertools.product(range(workers), repeat=len(times)))
        assert floor(times, workers) <= best + 1e-12
    assert floor([1.0] * 9, workers) == pytest.approx(math.ceil(9 / workers))
    assert floor([], workers) == 0.0


def test_decode_profile_decodes_the_engines_batches_and_bounds_their_workers(scripts, tmp_path, capsys):
    """Batch by batch it gives the whole split's tokens and scores; every part is a time; the ceiling lies between
    the output arithmetic spread evenly and all of it on one worker; --peers turns it into a multiple of fairseq's
    speed, and refuses another model's record."""
    run = untrained_run(tmp_path, "profiletiny", decode={"batch_tokens": 48, "max_len_a": 0.0, "max_len_b": 3})
    peers = {"benchmark": "peers_decode", "checkpoint_sha256": hashlib.sha256(
        (run / "checkpoints" / "best.pt").read_bytes()).hexdigest(),
        "fairseq": {key: {"sentences_per_s": 10.0} for key in ("greedy", "beam2")},
        "nmt": {key: {"sentences_per_s": 5.0, "mfu": 0.1} for key in ("greedy", "beam2")},
        "ratio": {"greedy": 0.5, "beam2": 0.5}}
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    out = tmp_path / "results"
    args = [str(run), "--limit", "12", "--beam", "2", "--threads", "1", "--workers", "2", "--peers",
            str(tmp_path / "peers.json"), "--out-dir", str(out)]
    assert scripts["decode_profile"].main(args) == 0
    result = json.loads((out / "decode_profile_profiletiny_cpu.json").read_text())
    for name, search in result["searches"].items():
        assert search["same_as_whole_split"] and search["sentences"] == 12 and len(search["batches"]) > 2
        for kept in search["bits"].values():  # a sentence that keeps its score's bits keeps its tokens
            assert 0 <= kept["same_scores"] <= kept["same_tokens"] <= 12
        assert min(search["parts"].values()) >= 0 and search["parts"]["matmuls"] > 0
        arithmetic = [batch["arithmetic_seconds"] for batch in search["batches"]]
        assert sum(arithmetic) / 2 - 1e-3 <= search["ceiling_seconds"] <= sum(arithmetic) + 1e-3
        assert 12 / search["ceiling_sentences_per_s"] == pytest.approx(search["ceiling_seconds"], abs=1e-3)
        expected = search["ceiling_sentences_per_s"] / 10.0
        assert result["peers"]["searches"][name]["ceiling_x_fairseq"] == pytest.approx(expected, abs=1e-2)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench:start -->\n<!-- bench:end -->\n")
    assert scripts["run_all"].main(["--report-only", "--results", str(out), "--readme", str(readme)]) == 0
    assert "| matmuls (output arithmetic) |" in readme.read_text() and "ceiling with 2 workers" in readme.read_text()
    peers["checkpoint_sha256"] = "0" * 64
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    capsys.readouterr()
    assert scripts["decode_profile"].main(args) == 1
    assert "peers.json: measured another model" in capsys.readouterr().err
    peers["checkpoint_sha256"] = result["checkpoint_sha256"]
    peers["fairseq"]["beam2"]["sentences_per_s"] = 0
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    assert scripts["decode_profile"].main(args) == 1  # refused before decoding
    assert "fairseq beam2 sentences_per_s is 0, not a positive speed" in capsys.readouterr().err


def test_bench_decode_compares_batched_with_one_at_a_time(scripts, tiny_run, tmp_path):
    _, run = tiny_run
    args = [str(run), "--limit", "2", "--batched-limit", "4", "--beam", "2", "--device", "cpu", "--threads", "1",
            "--peak-seconds", "0.05", "--out-dir", str(tmp_path)]
    assert scripts["decode"].main(args) == 0
    result = json.loads((tmp_path / "decode_benchtiny_cpu.json").read_text())
    assert set(result["searches"]) == {"greedy", "beam2"} and result["matmul_peak_tflops"]["fp32"] > 0
    for search in result["searches"].values():
        assert search["one_at_a_time"]["sentences"] == 2 and search["batched"]["sentences"] == 4
        assert search["speedup"] > 0
        for measured in (search["one_at_a_time"], search["batched"]):
            assert measured["model_gflops_per_s"] > 0 and 0 < measured["mfu"] < 1
    assert "engines" not in result


def test_bench_decode_times_sampling_as_a_third_search(scripts, tiny_run, tmp_path, monkeypatch):
    """--sampling adds a beam-1 search that samples with seed 1 at --top-p, into a record of its own name; the
    Translator it times decodes with those settings."""
    _, run = tiny_run
    decoded = []
    with_decode = Translator.with_decode

    def spy(self, *args, **changes):
        t = with_decode(self, *args, **changes)
        decoded.append(t.decode)
        return t

    monkeypatch.setattr(Translator, "with_decode", spy)
    args = [str(run), "--limit", "2", "--batched-limit", "4", "--beam", "2", "--device", "cpu", "--threads", "1",
            "--sampling", "--top-p", "0.9", "--peak-seconds", "0.05", "--out-dir", str(tmp_path)]
    assert scripts["decode"].main(args) == 0
    assert not (tmp_path / "decode_benchtiny_cpu.json").exists()
    result = json.loads((tmp_path / "decode_benchtiny_cpu_sampling.json").read_text())
    assert list(result["searches"]) == ["greedy", "beam2", "sampling_p0.9"]
    sampling = result["searches"]["sampling_p0.9"]
    assert {k: sampling[k] for k in ("beam", "sampling", "seed", "top_p")} == {
        "beam": 1, "sampling": True, "seed": 1, "top_p": 0.9}
    assert not any("sampling" in result["searches"][name] for name in ("greedy", "beam2"))
    for measured, sentences in ((sampling["one_at_a_time"], 2), (sampling["batched"], 4)):
        assert measured["sentences"] == sentences and measured["sentences_per_s"] > 0 and measured["bleu"] >= 0
        assert measured["model_gflops_per_s"] > 0 and 0 < measured["mfu"] < 1
    samples = [d for d in decoded if d.sampling]
    assert len(samples) == 2 and all(d.beam == 1 and d.seed == 1 and d.top_p == 0.9 for d in samples)
    assert {d.beam for d in decoded if not d.sampling} >= {1, 2}  # greedy and beam search without sampling
    assert "| sampling_p0.9 |" in scripts["run_all"].tables(tmp_path)


@pytest.mark.parametrize(("export", "engines", "sampling"), [
    (["--export", "float32", "int8"], ["pytorch fp32", "ctranslate2 float32", "ctranslate2 int8"], False),
    (["--export=int8", "--sampling"], ["pytorch fp32", "ctranslate2 int8"], True),
])
def test_bench_decode_measures_exports_beside_pytorch(scripts, tiny_run, tmp_path, export, engines, sampling):
    """Every engine decodes greedy and beam; only those that sample (PyTorch, not CTranslate2) the sampling search."""
    _, run = tiny_run
    args = [str(run), "--limit", "2", "--batched-limit", "4", "--beam", "2", "--device", "cpu", "--threads", "1",
            *export, "--out-dir", str(tmp_path)]
    assert scripts["decode"].main(args) == 0
    result = json.loads((tmp_path / f"decode_benchtiny_cpu{'_sampling' if sampling else ''}.json").read_text())
    assert list(result["engines"]) == engines
    for engine, searches in result["engines"].items():
        assert set(searches) == {"greedy", "beam2"} | ({"sampling"} if sampling and engine.startswith("pytorch")
                                                       else set())
        assert all(m["sentences"] == 4 and m["sentences_per_s"] > 0 and m["bleu"] >= 0 for m in searches.values())
    text = scripts["run_all"].tables(tmp_path)
    assert "| ctranslate2 int8 | beam2 |" in text and "x PyTorch" in text


@pytest.mark.parametrize(("change", "identical", "ensemble_and_glossary"), [
    ("a cap one token shorter", False, False), (None, True, True)])
def test_bench_decode_against_another_checkout_times_both_and_compares_their_outputs(scripts, tiny_run, tmp_path,
                                                                                    change, identical,
                                                                                    ensemble_and_glossary):
    """Against a copy whose outputs are capped one token shorter (the untrained model always reaches the cap):
    different tokens and scores; against a copy of this checkout's nmt/, the same ones, even for an ensemble
    searching for a glossary's terms (a worker that dropped a member or the glossary would differ)."""
    _, run = tiny_run
    extra, stem = [], "decode_benchtiny_cpu"
    if ensemble_and_glossary:
        glossary = tmp_path / "glossary.tsv"
        glossary.write_text("Hund\tpuppy\nMann\tguy\nFrau\tlady\n", encoding="utf-8")
        extra, stem = ["--ensemble", str(run), "--glossary", str(glossary)], f"{stem}_ensemble2_glossary"
    tree = tmp_path / "other"
    shutil.copytree(REPO / "nmt", tree / "nmt", ignore=shutil.ignore_patterns("__pycache__"))
    if change is not None:
        search = tree / "nmt" / "search.py"
        cap = ".floor().clamp(0, most).long()"
        search.write_text(search.read_text(encoding="utf-8").replace(cap, cap + " - 1"), encoding="utf-8")
    args = [str(run), "--limit", "1", "--batched-limit", "3", "--beam", "2", "--device", "cpu", "--threads", "1",
            "--against", str(tree), "--repeats", "2", "--peak-seconds", "0.05", "--out-dir", str(tmp_path), *extra]
    assert scripts["decode"].main(args) == 0
    result = json.loads((tmp_path / f"{stem}_against_other.json").read_text())
    assert result["benchmark"] == "decode_against" and result["trees"]["against"]["commit"] is None
    assert len(result["members"]) == (2 if ensemble_and_glossary else 1)
    assert result["trees"]["this"]["path"] == str(REPO.resolve())
    assert set(result["searches"]) == {"greedy", "beam2"}
    for search in result["searches"].values():
        for measurement, sentences in (("one_at_a_time", 1), ("batched", 3)):
            row = search[measurement]
            assert row["identical"] is identical and row["speedup"] > 0 and row["cpu_speedup"] > 0
            assert row["identical_scores"] is identical
            for side in ("this", "against"):
                assert row[side]["sentences"] == sentences and len(row[side]["passes"]) == 2
                assert row[side]["cpu_seconds"] > 0 and 0 < row[side]["mfu"] < 1


def test_bench_decode_against_refuses_a_checkout_whose_modules_come_from_elsewhere(scripts, tiny_run, tmp_path,
                                                                                     capsys):
    """A checkout lacking nmt/translator.py: the editable install serves this checkout's, which would time the
    wrong code, so the benchmark stops with one line naming the file."""
    _, run = tiny_run
    tree = tmp_path / "other"
    shutil.copytree(REPO / "nmt", tree / "nmt", ignore=shutil.ignore_patterns("__pycache__", "translator.py"))
    args = [str(run), "--limit", "1", "--batched-limit", "1", "--beam", "2", "--device", "cpu", "--threads", "1",
            "--against", str(tree), "--out-dir", str(tmp_path)]
    before = set(descendants(os.getpid()))
    assert scripts["decode"].main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "translator.py" in err and "from outside it" in err
    assert not list(tmp_path.glob("*.json"))
    assert set(descendants(os.getpid())) <= before  # the refused checkout's worker has ended



def test_bench_decode_against_refuses_a_folder_without_nmt_and_exports(scripts, tiny_run, tmp_path, capsys):
    _, run = tiny_run
    assert scripts["decode"].main([str(run), "--against", str(tmp_path)]) == 1
    assert "not a checkout of this project" in capsys.readouterr().err
    assert scripts["decode"].main([str(run), "--against", str(tmp_path), "--export"]) == 2
    assert "leave out --export" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "message"), [
    (["--against", "elsewhere", "--sampling"], "leave out --sampling (the other may not sample)"),
    (["--glossary", "terms.tsv", "--sampling"], "--glossary needs beam search: leave out --sampling"),
    (["--top-p", "0.9"], "--top-p shapes the sampling search: add --sampling"),
])
def test_bench_decode_refuses_sampling_where_it_cannot_run(scripts, tmp_path, capsys, flags, message):
    """Refused in one line while parsing, before any model is loaded or any file written."""
    assert scripts["decode"].main(["no/such/run", *flags, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", [["--repeats", "0"], ["--threads", "-1"], ["--limit", "-5"],
                                  ["--batched-limit", "-1"], ["--beam", "0"], ["--length-penalty", "nan"],
                                  ["--top-p", "0"], ["--top-p", "1.5"]])
def test_bench_decode_refuses_flags_out_of_range(scripts, capsys, flag):
    """Refused while parsing, in one line naming the flag, before any model is loaded."""
    assert scripts["decode"].main(["no/such/run", *flag]) == 2
    err = capsys.readouterr().err
    assert flag[0] in err and "allowed" in err and len(err.strip().splitlines()) == 1


def test_attention_methods_agree_where_they_should(scripts):
    bench = scripts["attention"]
    assert bench.METHODS == ("naive", "fused", "local", "linear")  # the registry's variants with a cost of their own
    q, k, v = (torch.randn(2, 2, 10, 8) for _ in range(3))
    naive = bench._function("naive", 8)(q, k, v)
    torch.testing.assert_close(bench._function("fused", 8)(q, k, v), naive)
    torch.testing.assert_close(bench._function("local", 10)(q, k, v), naive)  # the window covers everything
    assert bench._function("linear", 8)(q, k, v).shape == naive.shape


def test_bench_attention_and_readme_tables(scripts, tmp_path):
    cap = scripts["attention"].naive_footprint_gb(24, "fp32")  # 16 fits, 24 does not
    args = ["--lengths", "16", "24", "--methods", "naive", "--repeats", "1", "--device", "cpu", "--threads", "1",
            "--memory-cap", str(cap * 0.99), "--budget", "900", "--out-dir", str(tmp_path)]
    assert scripts["attention"].main(args) == 0
    result = json.loads((tmp_path / "attention_cpu.json").read_text())
    assert result["results"]["naive"]["16"]["ms"] > 0
    assert result["results"]["naive"]["24"]["skipped"].startswith("would exceed")

    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nintro\n<!-- bench:start -->\nstale\n<!-- bench:end -->\noutro\n")
    assert scripts["run_all"].main(["--report-only", "--results", str(tmp_path), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "stale" not in text and text.startswith("# Benchmarks\n\nintro\n") and text.endswith("outro\n")
    assert "### Attention" in text and "| 24 | would exceed" in text and "benchmarks.attention" in text


def test_results_table_check_mode_finds_a_stale_table_and_a_report_without_scores(scripts, tmp_path, capsys):
    tables = scripts["results_table"]
    results, files = _archived_results(tmp_path), _results_files(tmp_path)
    assert tables.main(["--results", str(results), *files]) == 0
    assert tables.main(["--check", "--results", str(results), *files]) == 0
    _edit(results / RUN / "eval_test.json", lambda d: d["scores"].update(bleu=d["scores"]["bleu"] + 1))
    assert tables.main(["--check", "--results", str(results), *files]) == 1
    assert "stale" in capsys.readouterr().err
    broken = tmp_path / "broken_run"
    broken.mkdir()
    (broken / "eval_test.json").write_text(json.dumps({"scores": {}}))
    assert tables.main(["--results", str(tmp_path), *files]) == 1
    assert "broken_run" in capsys.readouterr().err


def test_comparison_table_check_mode_finds_a_stale_table(scripts, tmp_path, capsys):
    """docs/comparing.md's attention table is generated from a comparison's compare.json and suite.json; --check
    says when the table no longer is what they give."""
    table, report = scripts["compare_table"], _committed_report(tmp_path / "report")
    files = _comparison_files(tmp_path)
    assert table.main(["--report", str(report), *files]) == 0
    assert table.main(["--report", str(report), *files, "--check"]) == 0
    _edit(report / "compare.json", lambda d: d["runs"][0].update(bleu=d["runs"][0]["bleu"] + 1.0))
    assert table.main(["--report", str(report), *files, "--check"]) == 1
    assert "stale" in capsys.readouterr().err


def test_comparison_summary_gives_the_full_tables_bleu_and_stars_what_the_bootstrap_separates(scripts, tmp_path):
    """README's short comparison table holds, for every usable variant, the BLEU of the full table on each test set,
    starred exactly where the full table's p is below 0.05."""
    table, report = scripts["compare_table"], _committed_report(tmp_path / "report")
    full = {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")[1:]
            for line in table.table(report).splitlines() if line.startswith("| ") and "test2016 BLEU" not in line}
    rows = [line.strip("| ").split(" | ") for line in table.summary(report).splitlines()
            if line.startswith("| ") and not line.startswith("| variant")]
    assert rows and len(rows) == sum(1 for row in json.loads((report / "compare.json").read_text())["runs"]
                                     if row["status"] == "ok")
    for name, _updates, *scores in rows:
        variant = name.removesuffix(" (baseline)")
        bleu, p = full[variant][0::2][-len(scores):], full[variant][1::2][-len(scores):]  # the four-test-set table
        assert [score.rstrip("*") for score in scores] == bleu
        assert [score.endswith("*") for score in scores] == [value.endswith("*") for value in p]
        assert name.endswith("(baseline)") == (p[0] == "baseline")


def _comparison_files(folder: Path) -> list[str]:
    """tools.compare_table's --readme and --summary flags, naming one file in `folder` with both blocks."""
    readme = folder / "README.md"
    readme.write_text("# x\n<!-- compare:start -->\nold\n<!-- compare:end -->\n"
                      "<!-- compare-summary:start -->\nold\n<!-- compare-summary:end -->\n", encoding="utf-8")
    return ["--readme", str(readme), "--summary", str(readme)]


def _committed_report(folder: Path) -> Path:
    """A copy of the two files of reports/multi30k that tools.compare_table reads."""
    folder.mkdir()
    for name in ("compare.json", "suite.json"):
        shutil.copyfile(REPO / "reports" / "multi30k" / name, folder / name)
    return folder


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def _readme(folder: Path, name: str) -> Path:
    readme = folder / "README.md"
    readme.write_text(f"# x\n<!-- {name}:start -->\nold\n<!-- {name}:end -->\n", encoding="utf-8")
    return readme


def _results_files(folder: Path) -> list[str]:
    """The results tables' --readme and --details flags, naming files in `folder` (never the repository's)."""
    details = folder / "details.md"
    details.write_text("<!-- directions:start -->\nold\n<!-- directions:end -->\n\n"
                       "<!-- recipe:start -->\nold\n<!-- recipe:end -->\n\n"
                       "<!-- models:start -->\nold\n<!-- models:end -->\n", encoding="utf-8")
    return ["--readme", str(_readme(folder, "results")), "--details", str(details)]


def _fail_every_run(data: dict) -> None:
    """What nmt-compare writes when no run is usable: no significance and no diagnostics."""
    for row in data["runs"]:
        row.update(status="failed", reason="no eval_test.json")
    for key in ("significance", "diagnostics", "diagnostics_sentences"):
        del data[key]
    data["baselines"] = {}


def test_comparison_table_shows_figures_a_report_lacks_as_dashes(scripts, tmp_path):
    """nmt-compare writes null speeds (a run shorter than log_every) and leaves out significance when no run
    is usable; both are tables, not crashes."""
    table, report = scripts["compare_table"], _committed_report(tmp_path / "report")
    _edit(report / "compare.json", lambda d: d["runs"][0].update(train_tgt_tok_s=None, decode_sentences_per_s=None))
    files = _comparison_files(tmp_path)
    readme = Path(files[1])
    assert table.main(["--report", str(report), *files]) == 0
    first = json.loads((report / "compare.json").read_text(encoding="utf-8"))["runs"][0]
    row = next(line for line in readme.read_text().splitlines() if line.startswith(f"| {first['attention']} |"))
    assert row.startswith(f"| {first['attention']} | {first['bleu']:.2f} | {first['chrf']:.2f} |")
    assert f"| {first['train_steps']:,} | – | – |" in row
    _edit(report / "compare.json", _fail_every_run)
    assert table.main(["--report", str(report), *files]) == 0
    text = readme.read_text()
    assert f"| {first['attention']} | failed: no eval_test.json |" in text and "paired bootstrap" not in text


def test_comparison_table_gives_every_official_test_set_in_release_order(scripts, tmp_path):
    """The committed Multi30k comparison has all four test sets: a second table gives BLEU and p on each, test2016
    first; a report without further test sets has no such table."""
    report = _committed_report(tmp_path / "report")
    text = scripts["compare_table"].table(report)
    header = next(line for line in text.splitlines() if line.startswith("| variant | test2016 BLEU"))
    assert [cell.split()[0] for cell in header.strip("| ").split(" | ")[1::2]] == \
        ["test2016", "test2017", "mscoco2017", "test2018"]
    _edit(report / "compare.json", lambda d: d.update(further_test_sets={}))
    assert "test2016 BLEU" not in scripts["compare_table"].table(report)


@pytest.mark.parametrize(("budget", "words"), [
    ("12m", "SUITE=multi30k BUDGET=12m`: each variant trained from scratch for the same wall-clock budget (12m) on"),
    ("1.5h", "BUDGET=1.5h`: each variant trained from scratch for the same wall-clock budget (1.5h) on"),
    ("20", "BUDGET=20`: each variant trained from scratch for the same number of updates (20) on"),
    (None, "SUITE=multi30k`: each variant trained from scratch until its config's own stopping rule on"),
])
def test_comparison_table_words_the_budget_suite_json_records(scripts, tmp_path, budget, words):
    report = _committed_report(tmp_path / "report")
    limits = importlib.import_module("benchmarks.compare_suite").budget_overrides(budget)[1::2]
    _edit(report / "suite.json", lambda d: d.update(budget=budget, overrides=limits))  # as compare_suite writes
    text = scripts["compare_table"].table(report)
    assert words in text and "None" not in text and "SET=" not in text
    _edit(report / "suite.json", lambda d: d.update(overrides=[*limits, "train.threads=1"]))  # with --set
    text = scripts["compare_table"].table(report)
    assert words.replace("`:", ' SET="--set train.threads=1"`:') in text and "2 cores, 1 threads" in text


@pytest.mark.parametrize(("damage", "named"), [
    (lambda r: (r / "compare.json").write_text("[]"), "compare.json"),
    (lambda r: (r / "compare.json").unlink(), "compare.json"),
    (lambda r: (r / "suite.json").unlink(), "suite.json"),
    (lambda r: (r / "suite.json").write_text('{"budget": "12m"'), "suite.json"),
    (lambda r: _edit(r / "suite.json", lambda d: d.pop("machine")), "suite.json"),
    (lambda r: _edit(r / "suite.json", lambda d: d.update(budget="soon")), "suite.json"),
    (lambda r: _edit(r / "compare.json", lambda d: d["runs"][0].pop("status")), "compare.json"),
], ids=["list", "no-compare", "no-suite", "cut-suite", "no-machine", "odd-budget", "no-status"])
def test_comparison_table_names_the_file_at_fault(scripts, tmp_path, capsys, damage, named):
    report = _committed_report(tmp_path / "report")
    damage(report)
    files = _comparison_files(tmp_path)
    readme = Path(files[1])
    assert scripts["compare_table"].main(["--report", str(report), *files]) == 1
    err = capsys.readouterr().err
    assert f"{report / named}:" in err and len(err.strip().splitlines()) == 1 and "unexpected" not in err
    assert "old" in readme.read_text()


@pytest.mark.parametrize("script", ["compare_table", "results_table"])
def test_table_scripts_name_an_unusable_readme(scripts, tmp_path, capsys, script):
    main = scripts[script].main
    assert main(["--check", "--readme", str(tmp_path / "missing.md")]) == 1
    assert str(tmp_path / "missing.md") in capsys.readouterr().err
    for flags in (["--check"], []):
        assert main([*flags, "--readme", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert str(tmp_path) in err and "folder" in err and len(err.strip().splitlines()) == 1


RUN = "tiny_transformer"  # the made-up archived run


def _archived_results(folder: Path) -> Path:
    """A made-up results/multi30k under `folder` holding RUN on the four test sets (tests/synthetic_archive.py)."""
    return archive_folder(folder / "results", RUN, tiny_config(folder / "configs", RUN)).parent


@pytest.mark.parametrize(("damage", "named", "says"), [
    (lambda run: _edit(run / "eval_test.json", lambda d: d["scores"].update(bleu=None)), "eval_test.json",
     "scores.bleu is null"),
    (lambda run: (run / "eval_test.json").write_text(re.sub(r'"chrf": [\d.]+', '"chrf": NaN',
                                                            (run / "eval_test.json").read_text(), count=1)),
     "eval_test.json", "scores.chrf is NaN"),
    (lambda run: (run / "eval_test.json").write_text("[1]"), "eval_test.json", "not an object"),
    (lambda run: _edit(run / "run.json", lambda d: d.pop("hardware")), "run.json", "no field 'hardware'"),
    (lambda run: _edit(run / "eval_test.json", lambda d: d.pop("decode")), "eval_test.json", "no field 'decode'"),
], ids=["null", "nan", "list", "no-hardware", "no-decode"])
def test_results_table_names_the_file_at_fault(scripts, tmp_path, capsys, damage, named, says):
    results = _archived_results(tmp_path)
    damage(results / RUN)
    files = _results_files(tmp_path)
    before = {name: (tmp_path / name).read_text() for name in ("README.md", "details.md")}
    assert scripts["results_table"].main(["--results", str(results), *files]) == 1
    err = capsys.readouterr().err
    assert f"{results / RUN / named}:" in err and says in err and len(err.strip().splitlines()) == 1
    assert {name: (tmp_path / name).read_text() for name in before} == before  # neither file written


def test_results_table_refuses_a_folder_without_reports(scripts, tmp_path, capsys):
    files = _results_files(tmp_path)
    for results in (tmp_path / "empty", tmp_path / "missing"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        assert scripts["results_table"].main(["--results", str(results), *files]) == 1
        assert str(results) in capsys.readouterr().err and "old" in (tmp_path / "README.md").read_text()


def test_results_table_orders_each_family_by_budget_from_the_configs(scripts, tmp_path):
    """Each model's recipe comes from its archived config: full length first, then update budgets, then time
    budgets, one table per family."""
    tables = scripts["results_table"]
    recipes = {  # name -> (arch, the config's train and model settings)
        "tiny_transformer_45min": ("transformer", {"max_steps": 0, "max_minutes": 45}, {}),
        "tiny_gru_none_20min": ("rnn", {"max_steps": 0, "max_minutes": 20}, {"attention": "none"}),
        "tiny_transformer": ("transformer", {"max_steps": 0, "max_epochs": 20}, {}),
    }
    for name, (arch, train, model) in recipes.items():
        tiny_config(tmp_path / "configs", name, arch, train=train, model=model)
        archive_folder(tmp_path / "results", name, tmp_path / "configs" / f"{name}.yaml")
    text = tables.tables(tmp_path / "results")
    transformer, gru = text.index("**Transformer**"), text.index("**GRU**")
    assert transformer < text.index("full length (20 epochs): `tiny_transformer`") < text.index(
        "45 minutes on 2 CPU cores: `tiny_transformer_45min`") < gru < text.index("GRU, no attention, 20 minutes")
    assert text.count("| 0123456 |") == 3


def _committed_bench(folder: Path) -> Path:
    folder.mkdir()
    shutil.copyfile(REPO / "benchmarks" / "results" / "train_multi30k_transformer_cpu.json",
                    folder / "train_multi30k_transformer_cpu.json")
    return folder


@pytest.mark.parametrize(("damage", "says"), [
    (lambda path: path.write_text(path.read_text()[:100]), "not valid JSON"),
    (lambda path: _edit(path, lambda d: d.pop("machine")), "no field 'machine'"),
    (lambda path: _edit(path, lambda d: d.update(steps_per_s=None)), "train_multi30k_transformer_cpu.json"),
], ids=["cut", "no-machine", "null"])
def test_bench_tables_name_the_results_file_at_fault(scripts, tmp_path, capsys, damage, says):
    results = _committed_bench(tmp_path / "results")
    damage(results / "train_multi30k_transformer_cpu.json")
    readme = _readme(tmp_path, "bench")
    assert scripts["run_all"].main(["--report-only", "--results", str(results), "--readme", str(readme)]) == 1
    err = capsys.readouterr().err
    assert f"{results / 'train_multi30k_transformer_cpu.json'}:" in err and says in err
    assert "unexpected" not in err and "old" in readme.read_text()


def test_bench_tables_refuse_a_missing_folder_or_readme_markers(scripts, tmp_path, capsys):
    bench, readme = scripts["run_all"], _readme(tmp_path, "bench")
    assert bench.main(["--report-only", "--results", str(tmp_path / "missing"), "--readme", str(readme)]) == 1
    assert str(tmp_path / "missing") in capsys.readouterr().err and "old" in readme.read_text()
    results, plain = _committed_bench(tmp_path / "results"), tmp_path / "plain.md"
    plain.write_text("# no markers\n")
    assert bench.main(["--report-only", "--results", str(results), "--readme", str(plain)]) == 1
    assert f"{plain}: the markers" in capsys.readouterr().err and plain.read_text() == "# no markers\n"


def test_bench_tables_check_mode_compares_without_writing(scripts, tmp_path, capsys):
    """--check runs nothing and writes nothing; the README's summary block holds the training, peer and
    decoding-against-fairseq tables."""
    bench = scripts["run_all"]
    results = tmp_path / "results"
    shutil.copytree(REPO / "benchmarks" / "results", results)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- bench-summary:start -->\nold\n<!-- bench-summary:end -->\n")
    assert bench.main(["--check", "--results", str(results), "--readme", str(readme)]) == 1
    assert "stale" in capsys.readouterr().err and "old" in readme.read_text()
    assert bench.main(["--report-only", "--results", str(results), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "### Training" in text and "### Against fairseq and OpenNMT-py" in text and "### Attention" not in text
    assert "### Decoding against fairseq-generate" in text
    assert bench.main(["--check", "--results", str(results), "--readme", str(readme)]) == 0


def test_agreement_table_shows_every_penalty_of_every_committed_record(scripts):
    """Each lp_agreement record gives one row per length penalty, with the difference it recorded."""
    records = {path.name: json.loads(path.read_text(encoding="utf-8"))
               for path in sorted((REPO / "benchmarks" / "results").glob("lp_agreement_*.json"))}
    assert records
    text = "\n".join(scripts["run_all"].SECTIONS["lp_agreement"](records))
    for record in records.values():
        for row in record["val"]["table"]:
            assert (f"| {record['run']} | {record['updates']:,} | {row['length_penalty']:.1f} "
                    f"| {row['pytorch_bleu']:.2f} | {row['ctranslate2_bleu']:.2f} | {row['difference']:.2f} |") in text
        assert record["checkpoint_sha256"][:12] in text


def test_trace_calls_prints_the_hops_that_reach_the_target():
    """tools.trace_calls stops at the target's first call and lists the calls made along the chain to it."""
    target = "nmt/config/loading.py:load_config"
    done = subprocess.run([sys.executable, "-m", "tools.trace_calls", target, "nmt.cli:prepare_main", "--",
                           "configs/sample_transformer.yaml"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    assert trace["chain"][-1] == target and "nmt/cli.py:prepare_main" in trace["chain"]
    assert "nmt/cli.py:prepare_main -> nmt/cli.py:config_from_args" in trace["hops"]
    assert trace["hop_count"] == len(trace["hops"]) and trace["files_before"] == len(trace["files"])


def test_translate_reaches_the_search_in_at_most_five_frames(trained_run):
    """The Python API's path, as docs/code.md draws it: Translator.translate to beam_search."""
    target = "nmt/search.py:beam_search"
    done = subprocess.run([sys.executable, "-m", "tools.trace_calls", target, "tools.trace_calls:translate_text", "--",
                           str(trained_run), "Ein Hund läuft."], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    chain = json.loads(done.stdout)["chain"]
    assert chain[0] == "nmt/translator.py:Translator.translate" and chain[-1] == target
    assert len(chain) <= 5, chain


def test_the_markup_benchmarks_documents_are_balanced_html_with_one_judged_tag_per_line():
    from benchmarks.markup import Read, balanced, documents

    lines = (REPO / "data" / "sample" / "test.de").read_text(encoding="utf-8").splitlines()[:60]
    docs = documents(lines)
    assert sum(len(judged) for _, judged in docs) == sum(1 for line in lines if line.split())
    for document, judged in docs:
        read = Read(document)
        assert balanced(read.tags), document  # the wider <strong> opens even where it covers one word
        assert set(judged) <= set(read.spans)


def test_reference_terms_are_content_words_the_output_lacks_linked_one_to_one():
    from benchmarks.constraints import reference_terms

    source = "Zwei Männer mit roten Hüten sitzen am Fluss .".split()
    reference = "Two men with red hats sit by the river .".split()
    # men<->Männer, with<->mit, red<->roten, hats<->Hüten one to one; sit linked to two source words; river and
    # Fluss one to one, but "the" also links to Fluss; Two (the first word) linked one to one
    links = {(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 5), (8, 8), (8, 7), (9, 9)}
    assert reference_terms(source, reference, "Two men with hats sit .", links) == ["red"]
    assert reference_terms(source, reference, "Two guys sit .", links) == ["men", "red"]  # two at most
    assert reference_terms(source, reference, "Two guys sit .", links, most=3) == ["men", "red", "hats"]
    assert reference_terms(source, reference, "Two men with red hats sit by the river .", links) == []


def test_constraint_coverage_counts_whole_words_on_lines_with_terms():
    from benchmarks.constraints import coverage, holds

    assert holds("A red T-shirt.", "t-shirt") and holds("a Red dog", "red") and not holds("hot dogs", "dog")
    outputs = ["a red dog runs", "hot dogs", "anything", "the ice cream"]
    terms = [["red", "dog"], ["dog"], [], ["ice cream"]]
    assert coverage(outputs, terms) == (3, 2)


def test_unconstrained_lines_are_compared_in_tokens_and_score_and_constrained_ones_skipped():
    from benchmarks.constraints import differences
    from nmt.search import Hypothesis

    plain = [[Hypothesis([1, 2], -1.0, -1.0)], [Hypothesis([3], -2.0, -2.0)], [], [Hypothesis([4], -1.0, -1.0)]]
    same = [[Hypothesis([1, 2], -1.0, -1.0)], [Hypothesis([5], -0.5, -0.5)], [], [Hypothesis([4], -1.0, -1.0)]]
    assert differences(plain, same, [[], ["x"], [], []]) == 0
    assert differences(plain, same, [[], [], [], []]) == 1
    rescored = [[Hypothesis([1, 2], -1.5, -1.0)], *same[1:]]
    assert differences(plain, rescored, [[], ["x"], [], []]) == 1


def test_bench_constraints_writes_a_constraints_file_line_for_line_and_keeps_unconstrained_lines(
        trained_run, tmp_path, one_thread):
    pytest.importorskip("eflomal")
    from benchmarks import constraints, run_all
    from nmt.glossary import constraint_terms
    from tools.commands import problem

    assert constraints.main([str(trained_run), "--sets", "test2016", "--speed", "--out-dir", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "constraints_shared_cpu.json").read_text())
    found = record["sets"]["test2016"]
    lines = (tmp_path / found["constraints_file"]["file"]).read_text(encoding="utf-8").split("\n")[:-1]
    sources = (REPO / "data" / "sample" / "test.de").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(sources) == found["lines"]
    terms = [constraint_terms(line, f"line {n}") for n, line in enumerate(lines, 1)]
    assert sum(bool(t) for t in terms) == found["lines_given_constraints"] > 0
    assert all(1 <= len(t) <= 2 for t in terms if t) and sum(map(len, terms)) == found["terms"]
    assert found["searches_meeting_every_term_share"] == 1.0  # nothing here reaches the length cap
    assert found["lines_without_constraints_differing"] == 0
    glossary = found["glossary"]
    assert 0 < glossary["lines_fired_in"] < len(sources) and glossary["lines_not_fired_in_differing"] == 0
    speed = record["speed"]
    assert speed["lines_given_a_constraint"] == speed["lines"] == len(sources) and speed["ratio"] > 0
    assert len((tmp_path / speed["constraints_file"]["file"]).read_text().splitlines()) == len(sources)
    assert record["checkpoint_sha256"] and record["commit"] and record["machine"]["torch_threads"] == 1
    assert problem(record["command"]) is None
    table = run_all.tables(tmp_path, ("constraints",))
    assert f"| shared | test2016 | {found['lines_given_constraints']} of {len(sources)} |" in table


def test_bench_sentence_split_scores_both_paragraph_forms_end_to_end(tiny_run, tmp_path):
    from benchmarks import sentence_split
    _, run = tiny_run
    args = [str(run), "--beam", "2", "--device", "cpu", "--threads", "1", "--out-dir", str(tmp_path)]
    assert sentence_split.main(args) == 0
    result = json.loads((tmp_path / "sentence_split_benchtiny_cpu.json").read_text())
    assert result["sentences"] == 80 and result["paragraphs"] == 27 and set(result["forms"]) == {"text", "spaces"}
    assert result["unsplit"]["bleu"] >= 0 and result["line_by_line"]["bleu"] >= 0
    for form in result["forms"].values():
        assert set(form["scores"]) == {"line_by_line_joined", "split"}
        assert 0 <= form["split_equals_line_by_line"] <= form["split_into_their_lines"] <= 27


def test_sentence_split_paragraphs_put_a_line_without_a_final_mark_on_a_line_of_its_own():
    from benchmarks.sentence_split import grouped, separators
    lines = ["Ein Mann fährt Fahrrad.", "Zwei Kinder im Park", "Eine Frau trinkt „Kaffee.“", "Ein Hund (klein)!",
             "Ein Haus"]
    assert grouped(lines, 3, separators(lines, "text")) == [
        "Ein Mann fährt Fahrrad.\nZwei Kinder im Park\nEine Frau trinkt „Kaffee.“", "Ein Hund (klein)!\nEin Haus"]
    assert grouped(lines, 3, separators(lines, "spaces")) == [
        "Ein Mann fährt Fahrrad. Zwei Kinder im Park Eine Frau trinkt „Kaffee.“", "Ein Hund (klein)! Ein Haus"]


def test_bench_sizing_writes_its_record_and_the_epoch_table_from_it(tiny_run, tmp_path):
    """A dry run: the tiny size for a fraction of a second on the sample, into a page of its own."""
    from benchmarks import sizing

    config, _ = tiny_run
    page = tmp_path / "training.md"
    page.write_text(f"# Training\n\n{sizing.START}\n{sizing.END}\n", encoding="utf-8")
    args = ["--config", str(config), "--sizes", "tiny", "--seconds", "0.3", "--warmup-steps", "1", "--threads", "1",
            "--out-dir", str(tmp_path), "--docs", str(page)]
    assert sizing.main(args) == 0
    written, = tmp_path.glob("sizing_*.json")
    record = json.loads(written.read_text())
    (size,) = record["sizes"]
    assert record["benchmark"] == "sizing" and record["command"].startswith("python -m benchmarks.sizing ")
    assert size["name"] == "tiny" and size["updates_per_s"] > 0 and size["pairs_per_s"] > 0
    assert size["model"]["model.d_model"] == sizing.SIZES["tiny"]["d_model"] and size["parameters"] > 0
    (row,) = [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("| tiny |")]
    minutes = 1_000_000 / size["pairs_per_s"] / 60
    assert row.endswith(f" {minutes:,.0f} |" if minutes >= 10 else f" {minutes:.1f} |")
    assert sizing.report(tmp_path) in page.read_text(encoding="utf-8")
