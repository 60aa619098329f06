"""Benchmarks: analytic FLOP counts against torch's counter, and each script end to end on tiny settings."""

from __future__ import annotations

import importlib
import json
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nmt.checkpoint import save_bundle
from nmt.cli import load
from nmt.config import ModelConfig
from nmt.data import prepare
from nmt.flops import forward_flops, linear_flops, training_flops
from nmt.models import build_model
from nmt.tokenizer import VocabInfo
from nmt.train import Trainer
from tests.conftest import REPO, tiny_config

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
    """The scripts set torch's thread count for the whole process; later tests get theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def scripts() -> Iterator[dict[str, ModuleType]]:
    """The benchmark and report scripts as modules (imported by name, as when run as scripts)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "scripts"))
        names = ("bench_train", "bench_decode", "bench_attention", "bench_all", "results_table", "compare_table",
                 "bench_peers", "profile_step")
        yield {name: importlib.import_module(name) for name in names}


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


def test_training_is_three_forwards_summed_over_pairs():
    cfg = ModelConfig(**TINY)
    expected = 3 * (forward_flops(cfg, 50, 4, 5) + forward_flops(cfg, 50, 7, 3))
    assert training_flops(cfg, 50, [4, 7], [5, 3]) == pytest.approx(expected)


def test_multi30k_transformer_is_near_the_issue_figure():
    """Issue 7 quotes about 46 MFLOP of training per target token for this config."""
    cfg = load(str(REPO / "configs" / "multi30k_transformer.yaml"), []).model
    per_token = 3 * forward_flops(cfg, 8000, 16, 16) / 16
    assert 40e6 < per_token < 52e6


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny config on the sample corpus and an (untrained) run folder with a checkpoint."""
    folder = tmp_path_factory.mktemp("bench")
    config = tiny_config(folder, name="benchtiny", train={"batch_tokens": 256})
    cfg = load(str(config), [])
    trainer = Trainer(cfg, prepare(cfg, log=lambda _msg: None), torch.device("cpu"))
    save_bundle(trainer.bundle(training=False), cfg.run_dir / "checkpoints" / "best.pt")
    return config, cfg.run_dir


def test_bench_train_writes_its_figures(scripts, tiny_run, tmp_path):
    config, _ = tiny_run
    args = [str(config), "--seconds", "0.3", "--warmup-steps", "1", "--threads", "1", "--matmul-size", "64",
            "--peak-seconds", "0.05", "--out-dir", str(tmp_path)]
    assert scripts["bench_train"].main(args) == 0
    written, = tmp_path.glob("train_benchtiny_*.json")  # named by the device the test config trains on
    result = json.loads(written.read_text())
    assert result["steps"] >= 1 and result["tgt_tokens_per_s"] > 0 and result["src_tokens_per_s"] > 0
    assert 0 <= result["padding_share"] < 1 and result["peak_rss_mb"] > 0 and result["mfu"] > 0
    assert set(result["matmul_peak_tflops"]) == {"fp32", "bf16"}
    assert result["command"].startswith("python scripts/bench_train.py") and result["machine"]["torch"]


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
    assert scripts["bench_peers"].main(args) == 0
    written, = out.glob("peers_benchtiny_cpu.json")
    result = json.loads(written.read_text())
    assert result["fastest_peer"] == "opennmt" and result["peers"]["fairseq"]["peak_rss_mb"] == 1829.7
    assert result["ratio_to_fastest"] == pytest.approx(result["nmt"]["tgt_tokens_per_s"] / 2000, abs=1e-3)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench:start -->\n<!-- bench:end -->\n")
    assert scripts["bench_all"].main(["--report-only", "--results", str(out), "--readme", str(readme)]) == 0
    assert "| benchtiny | 0.3 |" in readme.read_text() and "| 1,500 | 2,000 |" in readme.read_text()
    assert scripts["bench_peers"].parse_summary(PEER_SUMMARY.split("== OpenNMT")[0]).keys() == {"fairseq"}
    assert scripts["bench_peers"].main(["--kit", str(tmp_path / "none")]) == 2


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
    assert scripts["bench_peers"].main(["--decode", str(run), "--kit", str(kit), "--out-dir", str(out), *quick]) == 0
    result = json.loads((out / "peers_decode_benchtiny_cpu.json").read_text())
    assert result["fairseq"]["beam5"]["bleu"] == 31.2 and result["fairseq"]["greedy"]["bleu"] == 29.9
    assert result["fairseq"]["greedy"]["sentences_per_s"] == 116.43
    for search in ("greedy", "beam5"):
        expected = result["nmt"][search]["sentences_per_s"] / result["fairseq"][search]["sentences_per_s"]
        assert result["ratio"][search] == pytest.approx(expected, abs=1e-3)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- bench:start -->\n<!-- bench:end -->\n")
    assert scripts["bench_all"].main(["--report-only", "--results", str(out), "--readme", str(readme)]) == 0
    assert "| benchtiny | beam5 |" in readme.read_text() and "| 116.4 | 31.20 |" in readme.read_text()
    monkeypatch.setenv("PEERS", str(tmp_path / "nowhere"))
    assert scripts["bench_peers"].main(["--decode", str(run), "--kit", str(kit)]) == 2


def test_profile_step_accounts_for_the_whole_step(scripts, tiny_run, tmp_path):
    config, _ = tiny_run
    args = [str(config), "--steps", "2", "--warmup-steps", "1", "--threads", "1", "--out-dir", str(tmp_path)]
    assert scripts["profile_step"].main(args) == 0
    result = json.loads((tmp_path / "profile_benchtiny_cpu.json").read_text())
    parts = result["breakdown"]
    assert parts["matmul"] > 0 and parts["optimizer"] > 0 and parts["softmax and loss"] > 0
    assert min(parts.values()) >= 0
    assert sum(parts.values()) == pytest.approx(result["seconds"], abs=1e-4 * len(parts) + 1e-3)  # rounding
    assert scripts["profile_step"].category("aten::addmm") == "matmul"
    assert scripts["profile_step"].category("aten::_foreach_mul_") == "optimizer"
    assert scripts["profile_step"].category("aten::_log_softmax") == "softmax and loss"
    assert scripts["profile_step"].category("Some label") is None
    assert scripts["profile_step"].category("_Dropout/aten::where") == "dropout"
    assert scripts["profile_step"].category("_SmoothedCrossEntropyBackward/aten::mul") == "softmax and loss"


def test_bench_decode_compares_batched_with_one_at_a_time(scripts, tiny_run, tmp_path):
    _, run = tiny_run
    args = [str(run), "--limit", "2", "--batched-limit", "4", "--beam", "2", "--device", "cpu", "--threads", "1",
            "--out-dir", str(tmp_path)]
    assert scripts["bench_decode"].main(args) == 0
    result = json.loads((tmp_path / "decode_benchtiny_cpu.json").read_text())
    assert set(result["searches"]) == {"greedy", "beam2"}
    for search in result["searches"].values():
        assert search["one_at_a_time"]["sentences"] == 2 and search["batched"]["sentences"] == 4
        assert search["speedup"] > 0
    assert "engines" not in result


def test_bench_decode_measures_exports_beside_pytorch(scripts, tiny_run, tmp_path):
    pytest.importorskip("ctranslate2")
    _, run = tiny_run
    args = [str(run), "--limit", "2", "--batched-limit", "4", "--beam", "2", "--device", "cpu", "--threads", "1",
            "--export", "float32", "int8", "--out-dir", str(tmp_path)]
    assert scripts["bench_decode"].main(args) == 0
    result = json.loads((tmp_path / "decode_benchtiny_cpu.json").read_text())
    assert list(result["engines"]) == ["pytorch fp32", "ctranslate2 float32", "ctranslate2 int8"]
    for searches in result["engines"].values():
        assert set(searches) == {"greedy", "beam2"}
        assert all(m["sentences"] == 4 and m["sentences_per_s"] > 0 and m["bleu"] >= 0 for m in searches.values())
    text = scripts["bench_all"].tables(tmp_path)
    assert "| ctranslate2 int8 | beam2 |" in text and "x PyTorch" in text


def test_attention_methods_agree_where_they_should(scripts):
    bench = scripts["bench_attention"]
    q, k, v = (torch.randn(2, 2, 10, 8) for _ in range(3))
    naive = bench._function("naive", 8)(q, k, v)
    torch.testing.assert_close(bench._function("fused", 8)(q, k, v), naive)
    torch.testing.assert_close(bench._function("local", 10)(q, k, v), naive)  # the window covers everything
    assert bench._function("linear", 8)(q, k, v).shape == naive.shape


def test_bench_attention_and_readme_tables(scripts, tmp_path):
    cap = scripts["bench_attention"].naive_footprint_gb(24, "fp32")  # 16 fits, 24 does not
    args = ["--lengths", "16", "24", "--methods", "naive", "--repeats", "1", "--device", "cpu", "--threads", "1",
            "--memory-cap", str(cap * 0.99), "--budget", "900", "--out-dir", str(tmp_path)]
    assert scripts["bench_attention"].main(args) == 0
    result = json.loads((tmp_path / "attention_cpu.json").read_text())
    assert result["results"]["naive"]["16"]["ms"] > 0
    assert result["results"]["naive"]["24"]["skipped"].startswith("would exceed")

    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nintro\n<!-- bench:start -->\nstale\n<!-- bench:end -->\noutro\n")
    assert scripts["bench_all"].main(["--report-only", "--results", str(tmp_path), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "stale" not in text and text.startswith("# Benchmarks\n\nintro\n") and text.endswith("outro\n")
    assert "### Attention" in text and "| 24 | would exceed" in text and "bench_attention.py" in text


def test_readme_commands_reproduce_the_committed_reports(scripts):
    """Each results row's nmt-evaluate command decodes with exactly the settings its report was decoded with."""
    from nmt.cli import DECODE_FLAGS, _evaluate_parser, _flag
    from nmt.config import DecodeConfig, decode_with

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    reports = sorted((REPO / "results" / "multi30k").glob("*/eval_test.json"))
    assert reports
    for path in reports:
        report = json.loads(path.read_text(encoding="utf-8"))
        command = scripts["results_table"].evaluate_command(path.parent.name, report)
        assert f"`{command}`" in readme
        prog, *argv = shlex.split(command)
        args = _evaluate_parser().parse_args(argv)
        assert prog == "nmt-evaluate" and args.models == [f"runs/{path.parent.name}"] and args.split == "test"
        # Whatever the checkpoint holds, the flags alone fix every setting that changes the output.
        stored = DecodeConfig(beam=7, length_penalty=0.3, max_len_a=9.0, max_len_b=99)
        used = decode_with(stored, {key: getattr(args, key) for key in DECODE_FLAGS}, _flag)
        expected = {k: v for k, v in report["decode"].items() if k not in ("batch_tokens", "n_best")}
        assert {k: getattr(used, k) for k in expected} == expected
        assert args.precision == report.get("precision", "fp32")


def test_results_tables_match_the_committed_reports(scripts, tmp_path, capsys):
    tables = scripts["results_table"]
    assert tables.main(["--check"]) == 0, "run `python scripts/results_table.py` to regenerate README.md"
    broken = tmp_path / "multi30k_transformer_20min"
    broken.mkdir()
    (broken / "eval_test.json").write_text(json.dumps({"scores": {}}))
    assert tables.main(["--results", str(tmp_path)]) == 1
    assert "multi30k_transformer_20min" in capsys.readouterr().err


def test_comparison_table_matches_the_committed_report(scripts, tmp_path, capsys):
    """README's attention table is generated from reports/multi30k, whose scores are the runs' own reports."""
    table, committed = scripts["compare_table"], REPO / "reports" / "multi30k"
    assert table.main(["--check"]) == 0, "run `python scripts/compare_table.py` to regenerate README.md"
    data = json.loads((committed / "compare.json").read_text(encoding="utf-8"))
    assert len(data["runs"]) == 8 and all(row["status"] == "ok" for row in data["runs"])
    for row in data["runs"]:
        run = committed / "runs" / row["name"]
        assert json.loads((run / "eval_test.json").read_text(encoding="utf-8"))["scores"]["bleu"] == row["bleu"]
        assert len((run / "test.hyp.en").read_text(encoding="utf-8").splitlines()) == data["test_sentences"]
    data["runs"][0]["bleu"] += 1.0
    changed = tmp_path / "report"
    changed.mkdir()
    (changed / "compare.json").write_text(json.dumps(data), encoding="utf-8")
    shutil.copyfile(committed / "suite.json", changed / "suite.json")
    assert table.main(["--report", str(changed), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
