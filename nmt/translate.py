"""Streaming translation of text: constant memory, line order and count kept, atomic output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from itertools import islice
from pathlib import Path
from typing import IO

import numpy as np
import torch

from nmt.checkpoint import Loaded, load_model
from nmt.config import DecodeConfig
from nmt.data import normalize
from nmt.decode import Hypothesis, translate_ids
from nmt.diagnostics import Thresholds, attention_stats, flags
from nmt.plots import attention_heatmap
from nmt.utils import atomic_output


class Translator:
    """Translates chunks of lines with one loaded model."""

    def __init__(self, loaded: Loaded, decode: DecodeConfig, device: torch.device, precision: str = "fp32",
                 max_tokens: int = 250, chunk_lines: int = 2000, scores: bool = False,
                 plot_dir: str | None = None, plot_count: int = 10, stats_path: str | None = None,
                 thresholds: Thresholds | None = None) -> None:
        self.loaded, self.decode, self.device, self.precision = loaded, decode, device, precision
        self.max_tokens, self.chunk_lines, self.scores = max_tokens, chunk_lines, scores
        self.plot_dir = Path(plot_dir) if plot_dir else None
        self.plot_count, self.stats_path = plot_count, stats_path
        self.thresholds = thresholds or Thresholds()
        self.plotted = 0

    @classmethod
    def from_checkpoint(cls, path: str, device: torch.device, args: argparse.Namespace,
                        make_decode: Callable[[DecodeConfig, argparse.Namespace, int], DecodeConfig]) -> Translator:
        loaded = load_model(path, device)
        thresholds = Thresholds(args.focus_threshold, args.uniform_threshold, args.max_focused_share,
                                args.max_uniform_share)
        return cls(loaded, make_decode(loaded.cfg.decode, args, args.n_best), device, args.precision,
                   args.max_tokens, args.chunk_lines, args.scores, args.attention_plots, args.plot_count,
                   args.attention_stats, thresholds)

    def _encode(self, numbered: list[tuple[int, str]], name: str) -> list[np.ndarray]:
        tok = self.loaded.tokenizer
        texts = [normalize(line, self.loaded.cfg.data.lowercase) for _, line in numbered]
        ids = tok.encode_src(texts)
        for (number, _), seq in zip(numbered, ids):
            if len(seq) > self.max_tokens:
                print(f"warning: {name} line {number}: {len(seq)} subwords, truncated to {self.max_tokens}",
                      file=sys.stderr)
        return [np.asarray(seq[:self.max_tokens], dtype=np.int64) for seq in ids]

    def translate_chunk(self, numbered: list[tuple[int, str]], name: str = "<input>") -> list[list[Hypothesis]]:
        """N-best lists for (line number, text) pairs; empty lines give empty lists."""
        work = [(n, line) for n, line in numbered if line.strip()]
        want_attention = self.stats_path is not None or (self.plot_dir is not None and self.plotted < self.plot_count)
        nbest = translate_ids(self.loaded.model, self._encode(work, name), self.decode, self.device,
                              self.precision, return_attention=want_attention) if work else []
        by_line = dict(zip((n for n, _ in work), nbest))
        return [by_line.get(n, []) for n, _ in numbered]

    def _format(self, index: int, hyps: list[Hypothesis]) -> list[str]:
        decode = self.loaded.tokenizer.decode_tgt
        if self.decode.n_best > 1:
            return [f"{index} ||| {decode(h.tokens)} ||| {h.score:.4f}" for h in hyps]
        if not hyps:
            return [""]
        text = decode(hyps[0].tokens)
        return [f"{text}\t{hyps[0].score:.4f}" if self.scores else text]

    def _diagnose(self, numbered: list[tuple[int, str]], results: list[list[Hypothesis]],
                  stats_handle: IO | None) -> None:
        tok = self.loaded.tokenizer
        for (number, line), hyps in zip(numbered, results):
            if not hyps or hyps[0].attention is None:
                continue
            weights = hyps[0].attention.float()  # (T, S)
            if stats_handle is not None:
                stats = attention_stats(weights, self.thresholds, per_row=True)
                record = {"line": number, **stats, "flags": flags(stats, self.thresholds)}
                stats_handle.write(json.dumps(record) + "\n")
            if self.plot_dir is not None and self.plotted < self.plot_count:
                src = tok.src_pieces(normalize(line, self.loaded.cfg.data.lowercase))[:self.max_tokens] + ["</s>"]
                tgt = tok.tgt_id_pieces(hyps[0].tokens) + ["</s>"]
                attention_heatmap(weights.numpy(), src, tgt, self.plot_dir / f"line{number:05d}.png",
                                  title=tok.decode_tgt(hyps[0].tokens))
                self.plotted += 1

    def run(self, lines: Iterable[str], name: str, output: str | None) -> int:
        """Translate every line to `output` (atomically) or stdout; returns the number of lines."""
        count = 0
        out_ctx = atomic_output(output) if output else nullcontext(sys.stdout)
        stats_ctx = atomic_output(self.stats_path) if self.stats_path else nullcontext(None)
        with out_ctx as out, stats_ctx as stats_handle:
            for numbered in _chunks(enumerate(lines, 1), self.chunk_lines):
                results = self.translate_chunk(numbered, name)
                for (number, _), hyps in zip(numbered, results):
                    out.writelines(text + "\n" for text in self._format(number - 1, hyps))
                self._diagnose(numbered, results, stats_handle)
                out.flush()
                count += len(numbered)
        return count


def _chunks(items: Iterator[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    while chunk := list(islice(items, size)):
        yield chunk
