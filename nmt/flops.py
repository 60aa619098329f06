"""Analytic FLOP counts of the models, the measured matmul peak, and the machine facts benchmarks record.

Counts follow the usual model-FLOPs convention: a multiply-add is 2 FLOPs, only matrix products count
(element-wise work, norms, softmax and embedding lookups do not), and a training step costs 3 x the
forward pass (the backward pass computes gradients for both activations and weights, 2 x forward).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import resource
import shlex
import time
from pathlib import Path
from typing import Any

import torch

from nmt.config import ModelConfig
from nmt.models.attention import LocalAttention, band_spans
from nmt.utils import atomic_output

TRAINING_FACTOR = 3.0
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def linear_flops(tokens: float, in_features: int, out_features: int) -> float:
    """A dense layer applied to `tokens` positions: one multiply-add per weight per position."""
    return 2.0 * tokens * in_features * out_features


def _gru_flops(steps: float, input_size: int, hidden: int) -> float:
    """One GRU direction over `steps` positions: three gates, each from the input and the hidden state."""
    return linear_flops(steps, input_size, 3 * hidden) + linear_flops(steps, hidden, 3 * hidden)


def _self_attention_core(cfg: ModelConfig, length: int) -> float:
    """Scores and weighted values of one self-attention layer over `length` positions (all heads)."""
    if cfg.self_attention == "linear":
        head_dim = cfg.d_model // cfg.heads
        # phi(k)^T v (or its running sum), phi(q) times that, and the normaliser phi(q) . sum phi(k)
        return 2 * linear_flops(length, cfg.d_model, head_dim) + linear_flops(length, cfg.d_model, 1)
    if cfg.self_attention == "local":
        # blocks of queries, each against the keys within `window` positions of the block
        block = max(LocalAttention.block, cfg.window, 1)
        return sum(2 * linear_flops(stop - start, cfg.d_model, high - low)
                   for start, stop, low, high in band_spans(length, block, cfg.window))
    # Masked variants (causal, sparse) still compute the whole score matrix, so it all counts.
    return 2 * linear_flops(length, cfg.d_model, length)


def _transformer_flops(cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    d, f = cfg.d_model, cfg.ffn_dim
    ffn_src = linear_flops(src_len, d, f) + linear_flops(src_len, f, d)
    ffn_tgt = linear_flops(tgt_len, d, f) + linear_flops(tgt_len, f, d)
    encoder = (linear_flops(src_len, d, 3 * d) + _self_attention_core(cfg, src_len)
               + linear_flops(src_len, d, d) + ffn_src)
    self_attn = linear_flops(tgt_len, d, 3 * d) + _self_attention_core(cfg, tgt_len) + linear_flops(tgt_len, d, d)
    cross = (linear_flops(tgt_len, d, d) + linear_flops(src_len, d, 2 * d)  # queries; keys and values of memory
             + 2 * linear_flops(tgt_len, d, src_len) + linear_flops(tgt_len, d, d))  # scores, values, output
    decoder = self_attn + cross + ffn_tgt
    return cfg.encoder_layers * encoder + cfg.decoder_layers * decoder + linear_flops(tgt_len, d, vocab_size)


def _rnn_attention_flops(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    """The decoder's attention: keys projected once per sentence, scores and context at every step."""
    h = cfg.hidden_size
    context = linear_flops(tgt_len, src_len, h)
    if cfg.attention == "none":
        return context
    scores = linear_flops(tgt_len, src_len, h)  # q.k, or v^T tanh(...) for additive
    keys = linear_flops(src_len, h, h) if cfg.attention in ("additive", "general") else 0.0
    query = linear_flops(tgt_len, h, h) if cfg.attention == "additive" else 0.0
    return keys + query + scores + context


def _rnn_flops(cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    h, e = cfg.hidden_size, cfg.emb_dim
    encoder = sum(2 * _gru_flops(src_len, e if layer == 0 else h, h // 2) for layer in range(cfg.encoder_layers))
    bridge = linear_flops(1, cfg.encoder_layers * h, cfg.decoder_layers * h)
    feed = h if cfg.input_feeding else 0
    decoder = sum(_gru_flops(tgt_len, e + feed if layer == 0 else h, h) for layer in range(cfg.decoder_layers))
    combine = linear_flops(tgt_len, 2 * h, h)
    output = linear_flops(tgt_len, h, vocab_size)
    return encoder + bridge + decoder + _rnn_attention_flops(cfg, src_len, tgt_len) + combine + output


def forward_flops(model_cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    """Forward FLOPs of one sentence pair: `src_len` source positions (EOS included), `tgt_len` decoder steps.

    Embeddings are excluded; the output layer and attention are included.
    """
    if model_cfg.arch == "transformer":
        return _transformer_flops(model_cfg, vocab_size, src_len, tgt_len)
    if model_cfg.arch == "rnn":
        return _rnn_flops(model_cfg, vocab_size, src_len, tgt_len)
    raise ValueError(f"no FLOP count for model.arch '{model_cfg.arch}'")


def training_flops(model_cfg: ModelConfig, vocab_size: int, src_lens: list[int], tgt_lens: list[int]) -> float:
    """Training FLOPs (3 x forward) of a batch, from each pair's real lengths."""
    return TRAINING_FACTOR * sum(forward_flops(model_cfg, vocab_size, s, t) for s, t in zip(src_lens, tgt_lens))


# ---------------------------------------------------------------------------------------------- measuring


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, precision: str, size: int, seconds: float) -> float:
    """FLOP/s of repeated square (size x size) matmuls in `precision`, timed for about `seconds`."""
    a = torch.randn(size, size, device=device).to(DTYPES[precision])
    b = torch.randn(size, size, device=device).to(DTYPES[precision])
    torch.mm(a, b)  # first call: kernel selection and allocation
    _sync(device)
    runs, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        runs += 1
        if runs % 4 == 0 or device.type != "cuda":
            _sync(device)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return 2.0 * size**3 * runs / elapsed


def device_tag(device: torch.device, precision: str = "fp32") -> str:
    """'cpu' or the sanitised CUDA device name, plus the precision when it is not fp32 (file-name safe)."""
    name = "cpu" if device.type != "cuda" else torch.cuda.get_device_name(device)
    tag = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return tag if precision == "fp32" else f"{tag}_{precision}"


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KB


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict[str, Any]:
    """What a benchmark figure depends on besides the code: CPU, threads, versions, accelerator."""
    info: dict[str, Any] = {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                            "torch": torch.__version__, "python": platform.python_version(),
                            "platform": platform.platform()}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def command_line(script: str, argv: list[str]) -> str:
    """The shell command that reruns `script` (a path under scripts/) with `argv`."""
    return shlex.join(["python", f"scripts/{Path(script).name}", *argv])


def write_result(path: Path, device: torch.device, command: str, result: dict[str, Any]) -> dict[str, Any]:
    """Write a benchmark's JSON with the date, the command line and the machine; returns what was written."""
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": command, "machine": machine_info(device), **result}
    with atomic_output(path) as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")
    return record
