"""Training throughput against fairseq and OpenNMT-py, measured one right after the other on this machine.

Usage: python -m benchmarks.peers [CONFIG] [--seconds 180] [--kit ../shared/peers]
       python -m benchmarks.peers --decode RUN [--fairseq-checkpoint CKPT] [--kit ../shared/peers]

Runs `python -m benchmarks.train CONFIG --seconds N`, then the peers kit's `bench_train.sh N` (fairseq, then
OpenNMT-py, each for N seconds on the same model: Transformer 3+3, d256, FFN 1024, 4 heads, pre-norm, tied
embeddings, 4,096-token batches, fp32), and writes all three into one JSON under benchmarks/results with the
ratio of our target tokens/s to the faster peer's. Figures from different runs are never paired: these
machines differ by up to 1.6x from day to day. Install the kit first (`KIT/setup.sh`, once); run this alone
on the machine. Target tokens are real (non-padding) target tokens with EOS in all three.

With --decode RUN it pairs decoding instead: `python -m benchmarks.decode RUN` (greedy and beam 5 over the test
set), then the kit's `fairseq/decode.sh` (fairseq-generate, beam 5 and greedy, 64 sentences per batch) on a
fairseq checkpoint trained by the kit's `fairseq/train_20min.sh`, and writes both with the ratios into
peers_decode_<run>_cpu.json. Sentences/s of fairseq are its own "Translated ... sentences/s" figure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.common import ROOT, add_out_dir, arguments, command_line, module_command, module_env, prog, write_result
from nmt.cli import command

MODULE = "benchmarks.peers"
KIT = ROOT.parent / "shared" / "peers"
PEERS = {"fairseq": "fairseq", "opennmt": "OpenNMT-py"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/multi30k_transformer.yaml",
                        help="our config of the same model (default configs/multi30k_transformer.yaml)")
    parser.add_argument("--seconds", type=float, default=180.0, help="training seconds of each system (default 180)")
    parser.add_argument("--kit", type=Path, default=Path(os.environ.get("NMT_PEERS_KIT", KIT)),
                        help="the peers kit folder, holding bench_train.sh (default ../shared/peers)")
    add_out_dir(parser)
    parser.add_argument("--decode", metavar="RUN", help="pair decoding of this run with fairseq-generate instead")
    parser.add_argument("--fairseq-checkpoint", type=Path, default=None,
                        help="fairseq checkpoint to decode (default: the kit's $PEERS/fairseq/ckpt/checkpoint_last.pt)")
    parser.add_argument("--decode-arg", dest="decode_args", action="append", default=[], metavar="ARG",
                        help="one more argument for benchmarks.decode (repeat for several)")
    parser.add_argument("--train-arg", dest="train_args", action="append", default=[], metavar="ARG",
                        help="one more argument for benchmarks.train (repeat for several)")
    return parser.parse_args(argv)


def parse_summary(text: str) -> dict[str, dict[str, float]]:
    """Per peer, its mean target tokens/s after the skipped steps and its peak RSS, from the kit's summary."""
    found: dict[str, dict[str, float]] = {}
    for key, name in PEERS.items():
        section = re.search(rf"^== {re.escape(name)} .*?(?=^== |\Z)", text, re.M | re.S)
        if not section:
            continue
        rate = re.search(r"target tok/s after step \d+: mean (\d+(?:\.\d+)?)", section.group(0))
        rss = re.search(r"peak RSS: [\d.]+ GB \((\d+) kB\)", section.group(0))
        if rate and rss:
            found[key] = {"tgt_tokens_per_s": float(rate.group(1)), "peak_rss_mb": round(int(rss.group(1)) / 1024, 1)}
    return found


def pairing(ours: dict, peers: dict[str, dict[str, float]]) -> dict:
    """Our figures, the peers' and the ratios to the faster peer (None when a peer gave no figure)."""
    fastest = max(peers, key=lambda k: peers[k]["tgt_tokens_per_s"]) if peers else None
    out = {"nmt": {k: ours[k] for k in ("config", "tgt_tokens_per_s", "peak_rss_mb", "mfu", "threads")},
           "peers": peers, "fastest_peer": fastest, "ratio_to_fastest": None, "rss_ratio_to_fastest": None}
    if fastest:
        out["ratio_to_fastest"] = round(ours["tgt_tokens_per_s"] / peers[fastest]["tgt_tokens_per_s"], 3)
        out["rss_ratio_to_fastest"] = round(ours["peak_rss_mb"] / peers[fastest]["peak_rss_mb"], 3)
    return out


def parse_generate(log: str, results: str) -> dict[str, float]:
    """fairseq-generate's sentences/s and tokens/s from its log, and the BLEU that decode.sh printed after it."""
    rate = re.search(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s, "
                     r"([\d.]+) tokens/s\)", log)
    bleu = re.findall(r'"name": "BLEU",\s*"score": ([\d.]+)', results)
    if not rate or not bleu:
        raise ValueError("no 'Translated ...' line or BLEU score in fairseq's output")
    return {"sentences": int(rate.group(1).replace(",", "")), "seconds": float(rate.group(3)),
            "sentences_per_s": float(rate.group(4)), "tgt_tokens_per_s": float(rate.group(5)),
            "bleu": float(bleu[-1])}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fairseq_updates(logs: Path) -> int | None:
    """The update count fairseq's newest training log reached (None when no log says)."""
    found = [(path.stat().st_mtime, re.findall(r"num_updates=(\d+)", path.read_text("utf-8", errors="replace")))
             for path in logs.glob("train*.log")]
    counts = [numbers for _, numbers in sorted(found) if numbers]
    return int(counts[-1][-1]) if counts else None


def decode_pairing(args: argparse.Namespace, argv: list[str]) -> int:
    """Our decoding of RUN's test set, then fairseq-generate's, one right after the other; both into one JSON."""
    script = args.kit / "fairseq" / "decode.sh"
    if not script.is_file():
        print(f"error: {script} not found: pass --kit (the peers kit folder) or set NMT_PEERS_KIT", file=sys.stderr)
        return 2
    peers_home = Path(os.environ.get("PEERS", Path.home() / "nmt-peers"))
    checkpoint = args.fairseq_checkpoint or peers_home / "fairseq" / "ckpt" / "checkpoint_last.pt"
    if not checkpoint.is_file():
        print(f"error: {checkpoint} not found: train it with {args.kit / 'fairseq' / 'train_20min.sh'}",
              file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_peers.") as tmp:
        ours_cmd = module_command("benchmarks.decode", args.decode, "--split", "test", "--limit", "20",
                                  "--out-dir", tmp, *args.decode_args)
        if subprocess.run(ours_cmd, check=False, env=module_env()).returncode:
            print("error: benchmarks.decode failed", file=sys.stderr)
            return 1
        ours = json.loads(next(Path(tmp).glob("decode_*.json")).read_text(encoding="utf-8"))
    results_file = peers_home / "fairseq" / "logs" / "results.txt"
    before = results_file.read_text(encoding="utf-8") if results_file.is_file() else ""
    if subprocess.run(["bash", str(script), str(checkpoint)], check=False).returncode:
        print("error: the kit's fairseq/decode.sh failed", file=sys.stderr)
        return 1
    printed = results_file.read_text(encoding="utf-8")[len(before):]
    fairseq: dict[str, dict[str, float]] = {}
    for name, beam in (("greedy", 1), ("beam5", 5)):  # benchmarks.decode's default beam is 5, as decode.sh's
        log = (peers_home / "fairseq" / "logs" / f"decode.beam{beam}.log").read_text(encoding="utf-8")
        section = printed.split(f"== fairseq beam={beam} ")[1].split("== fairseq")[0]
        fairseq[name] = parse_generate(log, section)
    nmt = {name: ours["searches"][name]["batched"] for name in fairseq}
    result = {"benchmark": "peers_decode", "run": ours["run"], "load_average_before": round(load_before, 2),
              "checkpoint": ours["checkpoint"], "checkpoint_sha256": ours["checkpoint_sha256"],
              "updates": ours["updates"],
              "nmt": {"batch_tokens": ours["batch_tokens"], "length_penalty": ours["length_penalty"],
                      "threads": ours["threads"], "matmul_peak_tflops": ours["matmul_peak_tflops"], **nmt},
              "fairseq": {"checkpoint": str(checkpoint), "sha256": file_sha256(checkpoint),
                          "updates": fairseq_updates(peers_home / "fairseq" / "logs"), "batch_sentences": 64,
                          **fairseq},
              "ratio": {name: round(nmt[name]["sentences_per_s"] / fairseq[name]["sentences_per_s"], 3)
                        for name in fairseq}}
    out = args.out_dir / f"peers_decode_{ours['run']}_cpu.json"
    write_result(out, torch.device("cpu"), command_line(MODULE, argv), result)
    print("; ".join(f"{name}: nmt {nmt[name]['sentences_per_s']:.1f} sent/s, fairseq "
                    f"{fairseq[name]['sentences_per_s']:.1f} (x{result['ratio'][name]:.2f})" for name in fairseq)
          + f" -> {out}")
    return 0


@command
def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    if args.decode:
        return decode_pairing(args, argv)
    script = args.kit / "bench_train.sh"
    if not script.is_file():
        print(f"error: {script} not found: pass --kit (the peers kit folder) or set NMT_PEERS_KIT", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_peers.") as tmp:
        work = Path(tmp)
        ours_cmd = module_command("benchmarks.train", args.config, "--seconds", str(args.seconds), "--out-dir",
                                  str(work), *args.train_args)
        if subprocess.run(ours_cmd, check=False, env=module_env()).returncode:
            print("error: benchmarks.train failed", file=sys.stderr)
            return 1
        ours = json.loads(next(work.glob("train_*.json")).read_text(encoding="utf-8"))
        bench_dir = work / "peers"
        env = {**os.environ, "BENCH_DIR": str(bench_dir)}
        subprocess.run(["bash", str(script), str(max(1, round(args.seconds)))], env=env, check=False)
        summary = bench_dir / "summary.txt"
        peers = parse_summary(summary.read_text(encoding="utf-8")) if summary.is_file() else {}
    if not peers:
        print("error: the peers kit gave no figures (run its setup.sh first)", file=sys.stderr)
        return 1
    result = {"benchmark": "peers", "seconds": args.seconds, "load_average_before": round(load_before, 2),
              **pairing(ours, peers)}
    out = args.out_dir / f"peers_{ours['config']}_cpu.json"
    write_result(out, torch.device("cpu"), command_line(MODULE, argv), result)
    ratio = result["ratio_to_fastest"]
    print(f"nmt {ours['tgt_tokens_per_s']:.0f} tgt tok/s; " + "; ".join(
        f"{PEERS[k]} {v['tgt_tokens_per_s']:.0f}" for k, v in peers.items())
        + f"; x{ratio:.2f} the faster peer ({result['fastest_peer']}) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
