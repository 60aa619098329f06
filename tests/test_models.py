"""Model invariants: masking, attention variants, incremental decoding, padding, and a tiny overfit per family."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from nmt.config import VARIANTS, ModelConfig
from nmt.models import build_model, count_parameters
from nmt.models.attention import FullAttention, SelfAttention, variant_class
from nmt.models.attention.local import LocalAttention, _band_block, band_spans
from nmt.models.base import Seq2Seq
from nmt.tokenizer import VocabInfo

VOCAB = VocabInfo(src_size=20, tgt_size=20, joint=True)
TINY = {
    "rnn": {"emb_dim": 16, "hidden_size": 16, "encoder_layers": 2, "decoder_layers": 2},
    "transformer": {"d_model": 16, "heads": 2, "ffn_dim": 32, "encoder_layers": 2, "decoder_layers": 2},
}
VARIANT_SETTINGS = {"window": 1, "stride": 3}  # the local and sparse variants' own, where they read them
MODELS = (
    [("rnn", {"attention": name, "input_feeding": feed}) for name in VARIANTS["rnn"] for feed in (True, False)]
    + [("transformer", {"self_attention": name}) for name in VARIANTS["self"]]
    + [("transformer", {"pre_norm": False, "positions": "learned"})]
)
VARIANT_IDS = [f"{arch}-" + "-".join(f"{v}" for v in kw.values()) for arch, kw in MODELS]
SOME_VARIANTS = [(variant, name) for variant, name in zip(MODELS, VARIANT_IDS)
                 if name in ("rnn-additive-True", "transformer-linear", "transformer-False-learned")]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_model(arch: str, seed: int = 0, **overrides: object) -> Seq2Seq:
    torch.manual_seed(seed)
    block = _own_settings(str(overrides.get("self_attention", "full")), VARIANT_SETTINGS) if arch != "rnn" else {}
    cfg = ModelConfig(arch=arch, **{"dropout": 0.0, **TINY[arch], "self_attention_settings": block, **overrides})
    return build_model(cfg, VOCAB).eval()


def _own_settings(name: str, settings: dict[str, object]) -> dict[str, object]:
    """The settings among `settings` that the self-attention variant `name` declares."""
    return {s.name: settings[s.name] for s in VARIANTS["self"][name].settings if s.name in settings}


def make_batch(lengths: list[int], tgt_len: int = 6, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random source ids padded to the longest length, its mask, and random target inputs."""
    gen = torch.Generator().manual_seed(seed)
    src_mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    src = torch.randint(4, VOCAB.src_size, src_mask.shape, generator=gen).masked_fill(~src_mask, VOCAB.pad_id)
    tgt_in = torch.randint(4, VOCAB.tgt_size, (len(lengths), tgt_len), generator=gen)
    return src, src_mask, tgt_in


def key_mask(lengths: list[int], length: int) -> torch.Tensor:
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)


def self_core(name: str, temperature: float = 1.0, **settings: object) -> SelfAttention:
    """The self-attention variant `name` as the model builds it, from its settings block (each takes its own)."""
    cfg = ModelConfig(self_attention=name, temperature=temperature,
                      self_attention_settings=_own_settings(name, settings))
    return variant_class("self", name).from_config(cfg)


# Attention variants in isolation.

@pytest.mark.parametrize("name", list(VARIANTS["rnn"]))
def test_rnn_attention_weights_are_masked_distributions(name: str) -> None:
    torch.manual_seed(0)
    attention = variant_class("rnn", name)(8, 8)
    query, keys, values = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = key_mask([5, 3], 5)
    context, weights = attention(query, attention.project_keys(keys), values, mask)
    assert weights.shape == (2, 3, 5) and context.shape == (2, 3, 8)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    assert (weights.masked_select(~mask[:, None, :]) == 0).all()
    noise = torch.randn(2, 5, 8) * (~mask)[..., None]
    changed, _ = attention(query, attention.project_keys(keys + noise), values + noise, mask)
    torch.testing.assert_close(changed, context)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(VARIANTS["self"]))
def test_self_attention_weights_are_masked_distributions(name: str, causal: bool) -> None:
    torch.manual_seed(0)
    core = self_core(name, window=1, stride=2)
    q, k, v = (torch.randn(2, 2, 6, 4) for _ in range(3))  # (B, h, T, d)
    keys = key_mask([6, 4], 6)
    mask = core.build_mask(6, keys, causal, q.device)
    out, weights = core(q, k, v, mask, causal, need_weights=True)
    fused, _ = core(q, k, v, mask, causal)
    torch.testing.assert_close(fused, out)
    real = keys[:, None, :, None]  # real query rows, (B, 1, T, 1)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 6))
    assert (weights.masked_select(real & ~keys[:, None, None, :]) == 0).all()
    noise = torch.randn(2, 2, 6, 4) * (~keys)[:, None, :, None]
    for need_weights in (False, True):
        changed, _ = core(q, k + noise, v + noise, mask, causal, need_weights=need_weights)
        torch.testing.assert_close(changed * real, out * real)


def test_temperature_divides_softmax_scores() -> None:
    torch.manual_seed(0)
    query, keys, values = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = key_mask([5, 3], 5)
    for name in VARIANTS["rnn"]:
        cls = variant_class("rnn", name)
        torch.manual_seed(1)
        plain = cls(8, 8)
        torch.manual_seed(1)
        hot = cls(8, 8, temperature=2.0)
        _, expected = plain(query, plain.project_keys(keys), values, mask)
        _, weights = hot(query, hot.project_keys(keys), values, mask)
        torch.testing.assert_close(weights, (expected.log() / 2.0).softmax(-1), msg=name)
    q, k, v = (torch.randn(2, 2, 6, 4) for _ in range(3))
    keys = key_mask([6, 4], 6)
    for name in ("full", "local", "sparse"):
        plain, hot = self_core(name, window=1, stride=2), self_core(name, temperature=2.0, window=1, stride=2)
        mask = plain.build_mask(6, keys, True, q.device)
        _, expected = plain(q, k, v, mask, True, need_weights=True)
        _, weights = hot(q, k, v, mask, True, need_weights=True)
        torch.testing.assert_close(weights, (expected.log() / 2.0).softmax(-1), msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_local_with_whole_window_equals_full(causal: bool) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, 4) for _ in range(3))
    keys = key_mask([7, 5], 7)
    full, local = self_core("full"), self_core("local", window=7)
    for need_weights in (False, True):
        expected, _ = full(q, k, v, full.build_mask(7, keys, causal, q.device), causal, need_weights)
        actual, _ = local(q, k, v, local.build_mask(7, keys, causal, q.device), causal, need_weights)
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("window", "length"), [(1, 9), (3, 12), (4, 13), (8, 5), (0, 6)])
def test_banded_local_equals_masked_reference(window: int, length: int, causal: bool) -> None:
    """The linear-time band computes what the (T, T) mask over the fused kernel computes: outputs and gradients."""
    torch.manual_seed(window * 100 + length)
    lengths = [length, length - 3, 2]
    keys = key_mask(lengths, length)  # (B, T)
    core = LocalAttention(temperature=1.5, window=window)
    core.block = 4  # several query blocks even on short inputs
    inputs = [torch.randn(3, 2, length, 4, requires_grad=True) for _ in range(3)]
    weight = torch.randn(3, 2, length, 4) * keys[:, None, :, None]  # padded queries are never read
    reference = FullAttention.build_mask(core, length, keys, causal, keys.device)  # (B, 1, T, T)
    results = []
    for out in (core(*inputs, core.build_mask(length, keys, causal, keys.device), causal)[0],
                FullAttention.forward(core, *inputs, reference, causal)[0]):
        grads = torch.autograd.grad((out * weight).sum(), inputs)
        results.append((out * keys[:, None, :, None], *grads))
    for actual, expected in zip(*results):
        torch.testing.assert_close(actual, expected)


def test_banded_local_backward_replays_its_dropout() -> None:
    """The backward pass recomputes each block with the forward pass's random state: the gradients are those
    of the same blocks computed once under plain autograd with the same seed."""
    keys = key_mask([11, 7], 11)  # (B, T)
    core = LocalAttention(window=2, dropout=0.5).train()
    core.block = 3
    weight = torch.randn(2, 2, 11, 4)
    results = []
    for banded in (True, False):
        torch.manual_seed(5)
        inputs = [torch.randn(2, 2, 11, 4, requires_grad=True) for _ in range(3)]
        if banded:
            out = core(*inputs, core.build_mask(11, keys, True, keys.device), True)[0]
        else:
            scale = 1.0 / math.sqrt(4)
            out = torch.cat([_band_block(inputs[0][:, :, a:b], inputs[1][:, :, lo:hi], inputs[2][:, :, lo:hi],
                                         keys[:, lo:hi], a, lo, 2, True, scale, 0.5)
                             for a, b, lo, hi in band_spans(11, 3, 2)], dim=2)  # (B, h, T, d)
        results.append((out, *torch.autograd.grad((out * weight).sum(), inputs)))
    for actual, expected in zip(*results):
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("causal", [False, True])
def test_sparse_attends_exactly_to_its_pattern(causal: bool) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 10, 4) for _ in range(3))
    keys = key_mask([10, 8], 10)
    core = self_core("sparse", window=1, stride=4)
    _, weights = core(q, k, v, core.build_mask(10, keys, causal, q.device), causal, need_weights=True)
    i, j = torch.arange(10)[:, None], torch.arange(10)[None, :]
    expected = ((i - j).abs() <= 1) | (j % 4 == 0)  # (T, S)
    if causal:
        expected = expected & (j <= i)
    expected = expected & keys[:, None, :]  # (B, T, S)
    real = keys[:, :, None].expand(-1, -1, 10)  # rows of real queries
    assert torch.equal((weights > 0)[:, 0] & real, expected & real)
    assert torch.equal((weights > 0)[:, 1] & real, expected & real)


@pytest.mark.parametrize("causal, chunk", [(False, 64), (True, 64), (True, 4), (True, 1)])
def test_linear_attention_matches_reference(causal: bool, chunk: int, monkeypatch) -> None:
    """The causal form's chunks (one, a split with a shorter last chunk, one position each) all give the sums
    written out position by position over the real keys: outputs and gradients."""
    from nmt.models.attention import linear

    monkeypatch.setattr(linear, "CHUNK", chunk)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 4, requires_grad=True) for _ in range(3))
    weight = torch.randn(2, 2, 6, 4)  # a loss that reaches every output
    keys = key_mask([6, 4], 6)
    core = self_core("linear")
    out, _ = core(q, k, v, core.build_mask(6, keys, causal, q.device), causal)
    phi_q, phi_k = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    rows = []
    for b in range(2):
        for i in range(6):
            num, den = torch.zeros(2, 4), torch.zeros(2, 1)
            for j in range(6):
                if keys[b, j] and (j <= i or not causal):
                    sim = (phi_q[b, :, i] * phi_k[b, :, j]).sum(-1, keepdim=True)  # (h, 1)
                    num, den = num + sim * v[b, :, j], den + sim
            rows.append(num / den)
    expected = torch.stack(rows).view(2, 6, 2, 4).transpose(1, 2)  # (B, h, T, d)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad((out * weight).sum(), (q, k, v))
    expected_grads = torch.autograd.grad((expected * weight).sum(), (q, k, v))
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("name", list(VARIANTS["self"]))
def test_self_attention_step_matches_causal_forward(name: str) -> None:
    torch.manual_seed(0)
    core = self_core(name, window=1, stride=3)
    q, k, v = (torch.randn(2, 2, 7, 4) for _ in range(3))
    expected, _ = core(q, k, v, core.build_mask(7, None, True, q.device), causal=True)
    cache = core.init_cache(2, 2, 4, q)
    for t in range(7):
        out, cache = core.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], cache)
        torch.testing.assert_close(out[:, :, 0], expected[:, :, t])


@pytest.mark.parametrize("name", list(VARIANTS["self"]))
def test_a_reordered_cache_steps_as_the_rows_it_names_would(name: str) -> None:
    """Two reorders in a row (rows gathered lazily by some cores) give the cache of rows[a][b]: the next step
    equals stepping those rows' own keys from the start: exactly where the cache holds the keys and values
    themselves; to float rounding for the linear core, whose state is a running sum of matmuls that BLAS may round
    differently for inputs laid out differently in memory (seen on an AMD EPYC: 2e-8)."""
    torch.manual_seed(0)
    core = self_core(name, window=2, stride=3)
    q, k, v = (torch.randn(4, 2, 5, 4) for _ in range(3))
    first, second = torch.tensor([3, 3, 0, 1, 2]), torch.tensor([4, 0, 0])
    cache = core.init_cache(4, 2, 4, q)
    for t in range(4):
        _, cache = core.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], cache)
    cache = core.reorder_cache(core.reorder_cache(cache, first), second)
    rows = first[second]  # (3,) the original row of each
    out, _ = core.step(q[rows, :, 4:], k[rows, :, 4:], v[rows, :, 4:], cache)
    alone = core.init_cache(3, 2, 4, q)
    for t in range(5):
        expected, alone = core.step(q[rows, :, t:t + 1], k[rows, :, t:t + 1], v[rows, :, t:t + 1], alone)
    exact = {"rtol": 0, "atol": 0} if name != "linear" else {}
    torch.testing.assert_close(out, expected, **exact)


# Whole models, every family and variant.

@pytest.mark.parametrize(("arch", "overrides"), MODELS, ids=VARIANT_IDS)
def test_future_targets_do_not_change_earlier_outputs(arch: str, overrides: dict) -> None:
    model = tiny_model(arch, **overrides)
    src, src_mask, tgt_in = make_batch([7, 4, 6])
    changed = tgt_in.clone()
    changed[:, 3:] = torch.randint(4, VOCAB.tgt_size, (3, 3))
    with torch.no_grad():
        torch.testing.assert_close(model(src, src_mask, changed)[:, :3], model(src, src_mask, tgt_in)[:, :3])


@pytest.mark.parametrize(("arch", "overrides"), MODELS, ids=VARIANT_IDS)
def test_padded_source_tokens_do_not_change_outputs(arch: str, overrides: dict) -> None:
    model = tiny_model(arch, **overrides)
    src, src_mask, tgt_in = make_batch([7, 4, 6])
    noisy = src.masked_scatter(~src_mask, torch.randint(4, VOCAB.src_size, src.shape))
    with torch.no_grad():
        torch.testing.assert_close(model(noisy, src_mask, tgt_in), model(src, src_mask, tgt_in))


@pytest.mark.parametrize(("arch", "overrides"), MODELS, ids=VARIANT_IDS)
def test_incremental_decoding_matches_forward(arch: str, overrides: dict) -> None:
    model = tiny_model(arch, **overrides)
    src, src_mask, tgt_in = make_batch([7, 4, 6])
    with torch.no_grad():
        expected = model(src, src_mask, tgt_in).log_softmax(-1)  # (B, T, V)
        state = model.init_state(model.encode(src, src_mask), src_mask)
        for t in range(tgt_in.size(1)):
            log_probs, state = model.step(tgt_in[:, t], state)
            torch.testing.assert_close(log_probs, expected[:, t], atol=1e-5, rtol=1e-4)
            attention = state.attention  # (B, S)
            torch.testing.assert_close(attention.sum(-1), torch.ones(3))
            assert (attention.masked_select(~src_mask) == 0).all()


@pytest.mark.parametrize(("arch", "overrides"), MODELS, ids=VARIANT_IDS)
def test_training_step_reaches_every_parameter(arch: str, overrides: dict) -> None:
    model = tiny_model(arch, dropout=0.1, attention_dropout=0.1, **overrides).train()
    src, src_mask, tgt_in = make_batch([7, 4, 6])
    model(src, src_mask, tgt_in).logsumexp(-1).mean().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.isfinite().all()]
    assert not missing


@pytest.mark.parametrize(("arch", "overrides"), [v for v, _ in SOME_VARIANTS], ids=[n for _, n in SOME_VARIANTS])
def test_kept_positions_give_the_same_logits_and_gradients(arch: str, overrides: dict) -> None:
    model = tiny_model(arch, **overrides)
    src, src_mask, tgt_in = make_batch([7, 4, 6])
    keep = key_mask([6, 2, 4], tgt_in.size(1))  # (B, T)
    full = model(src, src_mask, tgt_in)  # (B, T, V)
    kept = model(src, src_mask, tgt_in, keep)  # (N, V)
    torch.testing.assert_close(kept, full[keep])
    grads = [torch.autograd.grad(out.square().sum(), list(model.parameters()), allow_unused=True)
             for out in (full[keep], kept)]
    for a, b in zip(*grads):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("arch", "overrides"), MODELS, ids=VARIANT_IDS)
def test_regrouped_rows_decode_their_own_sentence_and_prefix(arch: str, overrides: dict) -> None:
    """As beam search moves rows: one row per sentence grows to two, the two swap, a sentence leaves. Each row's
    step log-probabilities stay the teacher-forced ones of its sentence and the tokens that row was fed."""
    model = tiny_model(arch, **overrides)
    src, src_mask, _ = make_batch([7, 4, 6])
    gen = torch.Generator().manual_seed(1)
    moves = [torch.tensor([[0, 0], [1, 1], [2, 2]]), torch.tensor([[1, 0], [3, 2], [5, 4]]),
             torch.tensor([[0, 1], [4, 4]]), None]  # rows (G', W') as `reorder_state` takes them
    sentences, prefixes = [0, 1, 2], [[VOCAB.bos_id]] * 3
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask)
        for rows in moves:
            log_probs, state = model.step(torch.tensor([prefix[-1] for prefix in prefixes]), state)  # (rows, V)
            for row, (sent, prefix) in enumerate(zip(sentences, prefixes, strict=True)):
                alone = model(src[sent:sent + 1], src_mask[sent:sent + 1], torch.tensor([prefix]))  # (1, t, V)
                torch.testing.assert_close(log_probs[row], alone[0, -1].log_softmax(-1), atol=1e-5, rtol=1e-4)
            fed = torch.randint(4, VOCAB.tgt_size, (len(prefixes),), generator=gen).tolist()
            prefixes = [prefix + [token] for prefix, token in zip(prefixes, fed, strict=True)]
            if rows is not None:
                state = model.reorder_state(state, rows)
                sentences = [sentences[r] for r in rows.view(-1).tolist()]
                prefixes = [prefixes[r] for r in rows.view(-1).tolist()]


def test_gru_encoder_ignores_padding() -> None:
    model = tiny_model("rnn")
    src, src_mask, _ = make_batch([5, 3])
    padded = torch.nn.functional.pad(src, (0, 4), value=VOCAB.pad_id)
    padded_mask = torch.nn.functional.pad(src_mask, (0, 4), value=False)
    with torch.no_grad():
        for row in range(2):
            length = int(src_mask[row].sum())
            alone = model.encode(src[row:row + 1, :length], src_mask[row:row + 1, :length])
            batched = model.encode(padded, padded_mask)
            torch.testing.assert_close(batched["memory"][row, :length], alone["memory"][0])
            torch.testing.assert_close(batched["final"][row], alone["final"][0])
            assert (batched["memory"][row, length:] == 0).all()


# Factory.

def test_build_model_logs_size_and_ties_embeddings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="nmt.models"):
        model = tiny_model("transformer")
    assert f"model: transformer, {count_parameters(model)} parameters" in caplog.text
    assert model.output.weight is model.tgt_embed.tokens.weight is model.src_embed.tokens.weight
    untied = tiny_model("transformer", tie_embeddings=False)
    assert count_parameters(untied) == count_parameters(model) + 2 * VOCAB.tgt_size * 16
    rnn = tiny_model("rnn")
    assert rnn.output.weight is rnn.tgt_embed.weight is rnn.src_embed.weight


# Each family learns a tiny copy-and-reverse task.

def reverse_task(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """10 random sentences of 4-8 tokens; the target is the source reversed, then EOS."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 9, (10,), generator=gen).tolist()
    src = torch.full((10, 9), VOCAB.pad_id)
    tgt_in = torch.full((10, 9), VOCAB.pad_id)
    tgt_out = torch.full((10, 9), VOCAB.pad_id)
    for row, length in enumerate(lengths):
        tokens = torch.randint(4, VOCAB.src_size, (length,), generator=gen)
        src[row, :length + 1] = torch.cat([tokens, torch.tensor([VOCAB.eos_id])])
        tgt_in[row, :length + 1] = torch.cat([torch.tensor([VOCAB.bos_id]), tokens.flip(0)])
        tgt_out[row, :length + 1] = torch.cat([tokens.flip(0), torch.tensor([VOCAB.eos_id])])
    return src, src != VOCAB.pad_id, tgt_in, tgt_out


@pytest.mark.parametrize(("arch", "overrides", "steps"), [
    ("rnn", {"emb_dim": 32, "hidden_size": 32, "encoder_layers": 1, "decoder_layers": 1}, 200),
    ("transformer", {"d_model": 32, "heads": 2, "ffn_dim": 64}, 120),
])
def test_family_overfits_reversal(arch: str, overrides: dict, steps: int) -> None:
    model = tiny_model(arch, **overrides).train()
    src, src_mask, tgt_in, tgt_out = reverse_task()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=VOCAB.pad_id)
    for _ in range(steps):
        loss = loss_fn(model(src, src_mask, tgt_in).flatten(0, 1), tgt_out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        predicted = model(src, src_mask, tgt_in).argmax(-1)
    real = tgt_out != VOCAB.pad_id
    accuracy = (predicted == tgt_out)[real].float().mean().item()
    assert accuracy > 0.95
