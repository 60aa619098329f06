"""The summary of prepared data, and the warning of a vocabulary too large for its corpus."""

from __future__ import annotations

import numpy as np

from nmt.data.batching import TokenBatchSampler, padding_fraction
from nmt.data.pipeline import Prepared


def summary(prepared: Prepared, sampler: TokenBatchSampler | None = None) -> str:
    """Pairs per split and corpus, drops, vocabularies, and the padding of `sampler`'s (or a new sampler's) batches."""
    stats, cfg = prepared.stats, prepared.config
    d = cfg.data
    lines = [f"dataset {d.dataset}, cache {stats['cache_key']} ({'hit' if stats['cache_hit'] else 'built'})",
             f"{'split':<8}{'read':>12}{'kept':>12}"]
    lines += [f"{s:<8}{stats['pairs_read'][s]:>12,}{stats['pairs_kept'][s]:>12,}" for s in stats["pairs_read"]]
    corpora = stats.get("corpora", [])
    if len(corpora) > 1:
        lines.append("training corpora (read / kept, and the rows stored of a weighted one): " + "; ".join(
            f"{c['name']}{' ' + c['tag'] if c['tag'] else ''} {c['read']:,} / {c['kept']:,}"
            + (f" x {c['weight']:g} = {c['rows']:,}" if c["weight"] != 1 else "") for c in corpora))
    dropped = stats["dropped"]
    lines.append(f"dropped from train: {dropped['empty']:,} empty, {dropped['duplicate']:,} duplicates, "
                 f"{dropped['too_long']:,} longer than {d.max_tokens} subwords, {dropped['ratio']:,} with length "
                 f"ratio above {d.max_ratio:g}")
    v = stats["vocab"]
    kind = "joint" if v["joint"] else "separate"
    lines.append(f"vocabulary ({kind}, {cfg.tokenizer.type}): source {v['src']:,}, target {v['tgt']:,}")
    train = prepared.splits["train"]
    if sampler is None:
        sampler = TokenBatchSampler(train.src_lens, train.tgt_lens, cfg.train.batch_tokens, seed=cfg.train.seed)
    frac = padding_fraction(sampler, train.src_lens, train.tgt_lens)
    lines.append(f"training batches at {cfg.train.batch_tokens:,} tokens: {len(sampler.batches):,} batches, "
                 f"padding {100 * frac:.1f}%")
    return "\n".join(lines)


FREQUENT = 100  # occurrences that make a subword well learned (Gowda & May, 2020)
FREQUENT_SHARE = 0.95  # share of the vocabulary that should be that frequent
CHUNK_IDS = 1 << 24  # ids counted at a time


def _counts(ids: object, size: int) -> np.ndarray:
    """How often each id in [0, size) occurs in a side's flat ids."""
    flat = ids.flat  # type: ignore[attr-defined]
    counts = np.zeros(size, dtype=np.int64)
    for start in range(0, len(flat), CHUNK_IDS):
        counts += np.bincount(np.asarray(flat[start:start + CHUNK_IDS]), minlength=size)[:size]
    return counts


def vocabulary_warning(prepared: Prepared) -> str | None:
    """A warning when under 95% of the subwords occur 100 times in the training data (Gowda & May, 2020), else None."""

    train, vocab = prepared.splits["train"], prepared.tokenizer.vocab
    sides = ([("joint", _counts(train.src, vocab.src_size) + _counts(train.tgt, vocab.src_size))] if vocab.joint else
             [("source", _counts(train.src, vocab.src_size)), ("target", _counts(train.tgt, vocab.tgt_size))])
    special = max(vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) + 1
    problems = []
    for side, counts in sides:
        pieces = counts[special:]
        frequent = int((pieces >= FREQUENT).sum())
        if frequent < FREQUENT_SHARE * len(pieces):
            problems.append(f"{side} {len(pieces):,} subwords, {frequent:,} ({100 * frequent / len(pieces):.0f}%) "
                            f"occur {FREQUENT} times or more")
    if not problems:
        return None
    return (f"tokenizer.vocab_size {prepared.config.tokenizer.vocab_size:,} is large for this corpus: "
            f"{'; '.join(problems)} in the training data, where Gowda & May's rule (2020) asks for "
            f"{100 * FREQUENT_SHARE:.0f}%; consider a smaller one (docs/data.md, 'How large a vocabulary')")
