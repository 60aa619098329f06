"""The human-readable summary of prepared data: counts per split and corpus, drops, vocabularies, padding."""

from __future__ import annotations

from nmt.data.batching import TokenBatchSampler, padding_fraction
from nmt.data.pipeline import Prepared


def summary(prepared: Prepared, sampler: TokenBatchSampler | None = None) -> str:
    """Pairs per split (and per training corpus) before and after cleaning, drops, vocabularies, and the padding of
    the training batches: those of `sampler` (a trainer's), else of a sampler made here with the train settings."""
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
