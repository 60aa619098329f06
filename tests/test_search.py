"""Search invariants: hand-worked beam results under both stopping rules, batch invariance, beam 1 == greedy,
lengths, n-best, ensembles, and lexically constrained search."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from nmt.config import DecodeConfig
from nmt.constraints import Constraints
from nmt.models.base import Memory, Seq2Seq, State
from nmt.search import (
    Ensemble,
    Hypothesis,
    beam_search,
    constrained_beam_search,
    gnmt_penalty,
    greedy_search,
    max_lengths,
    row_argmax,
    row_topk,
)
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID

A, B, C, D = 4, 5, 6, 7
VOCAB = 8


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def settings(max_len_a: float, max_len_b: int, beam: int = 1, length_penalty: float = 0.0, **more) -> DecodeConfig:
    """A search's settings: its length limits, beam 1 and no length penalty unless given."""
    return DecodeConfig(beam=beam, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b, **more)


@dataclass
class ScriptedState(State):
    prefix: torch.Tensor  # (rows, t) tokens read so far, BOS first
    src_mask: torch.Tensor  # (rows, S)


class ScriptedModel(Seq2Seq):
    """Next-token probabilities looked up by the prefix generated so far; the source only sets lengths."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], default: dict[int, float]) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
        self.table, self.default = table, default
        self.rows_per_step: list[int] = []

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        return {"src_mask": src_mask}

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> ScriptedState:
        return ScriptedState(torch.empty(src_mask.size(0), 0, dtype=torch.long), src_mask)

    def step(self, prev_tokens: torch.Tensor, state: ScriptedState) -> tuple[torch.Tensor, ScriptedState]:
        self.rows_per_step.append(prev_tokens.numel())
        prefix = torch.cat([state.prefix, prev_tokens[:, None]], dim=1)  # (B, t+1), BOS first
        probs = torch.zeros(prefix.size(0), VOCAB)
        for row, tokens in enumerate(prefix[:, 1:].tolist()):
            for token, p in self.table.get(tuple(tokens), self.default).items():
                probs[row, token] = p
        mask = state.src_mask.float()
        return probs.log(), ScriptedState(prefix, state.src_mask, width=state.width,
                                          attention=mask / mask.sum(1, keepdim=True))


@dataclass
class ToyState(State):
    h: torch.Tensor  # (rows, H)
    memory: torch.Tensor  # (rows, S, H)
    src_mask: torch.Tensor  # (rows, S)
    t: torch.Tensor  # (rows,) steps taken minus the source length


class ToyGRU(Seq2Seq):
    """A tiny randomly initialised GRU encoder-decoder with dot-product attention over masked memory.

    The EOS logit rises as the output grows past the source length, so sentences end at varied lengths.
    """

    def __init__(self, vocab: int = 24, hidden: int = 16, eos_slope: float = 0.3, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
        self.embed = nn.Embedding(vocab, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.cell = nn.GRUCell(hidden, hidden)
        self.out = nn.Linear(2 * hidden, vocab)
        self.eos_slope = eos_slope
        self.eval()

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        memory, _ = self.encoder(self.embed(src))  # (B, S, H); right padding leaves real positions untouched
        return {"memory": memory}

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> ToyState:
        mask = src_mask.float()[:, :, None]  # (B, S, 1)
        h = (memory["memory"] * mask).sum(1) / mask.sum(1)  # (B, H)
        return ToyState(h, memory["memory"], src_mask, -src_mask.sum(1).float())

    def step(self, prev_tokens: torch.Tensor, state: ToyState) -> tuple[torch.Tensor, ToyState]:
        h = self.cell(self.embed(prev_tokens), state.h)  # (B, H)
        logits = torch.einsum("bsh,bh->bs", state.memory, h).masked_fill(~state.src_mask, float("-inf"))
        attention = logits.softmax(-1)  # (B, S)
        context = torch.einsum("bs,bsh->bh", attention, state.memory)  # (B, H)
        logits = self.out(torch.cat([h, context], -1))  # (B, V)
        logits[:, EOS_ID] += self.eos_slope * state.t
        return logits.log_softmax(-1), ToyState(h, state.memory, state.src_mask, state.t + 1, width=state.width,
                                                attention=attention)


# Greedy takes A (0.6) then C (0.4): A C scores 0.24. Beam 2 also keeps B, whose EOS gives 0.26.
SCRIPT = {
    (): {A: 0.6, B: 0.4},
    (A,): {C: 0.4, A: 0.35, EOS_ID: 0.25},
    (B,): {EOS_ID: 0.65, A: 0.35},
    (A, C): {EOS_ID: 1.0},
    (A, A): {EOS_ID: 0.6, B: 0.4},
}
ONLY_EOS = {EOS_ID: 1.0}
# Beam 2, alpha 2: EOS (.3) and A EOS (.33) finish by step 2, while A C (.27) goes on to A C D EOS (.231).
LONG = {
    (): {A: 0.6, EOS_ID: 0.3, B: 0.1},
    (A,): {EOS_ID: 0.55, C: 0.45},
    (B,): {EOS_ID: 1.0},
    (A, C): {D: 0.9, EOS_ID: 0.1},
    (A, C, D): {EOS_ID: 0.95, D: 0.05},
}
STOPS = ["finished", "bound"]
# EOS is never among the best expansions, so every hypothesis runs until EOS is forced.
NO_EOS = {A: 0.4, B: 0.3, C: 0.2, D: 0.0999, EOS_ID: 1e-4}


def one_source(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded sources of the given real lengths (token ids are irrelevant to the scripted model)."""
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    return torch.where(mask, A, PAD_ID), mask


def random_batch(count: int, seed: int, vocab: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 13, (count,), generator=g)
    mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]  # (B, S)
    src = torch.randint(4, vocab, mask.shape, generator=g).masked_fill(~mask, PAD_ID)
    return src, mask


def as_tuples(hyps: list[Hypothesis]) -> list[tuple[tuple[int, ...], float]]:
    return [(tuple(h.tokens), h.log_prob) for h in hyps]


def test_greedy_is_misled_by_the_script() -> None:
    src, mask = one_source([3])
    (hyp,) = greedy_search(ScriptedModel(SCRIPT, ONLY_EOS), src, mask, settings(2.0, 5))
    assert hyp.tokens == [A, C]
    assert hyp.log_prob == pytest.approx(math.log(0.24), abs=1e-5)
    assert hyp.score == hyp.log_prob


def test_beam_two_finds_the_better_hypothesis_without_penalty() -> None:
    # Step 1 best four: B EOS .26 (finished), A C .24, A A .21, A EOS .15 (outside the top 2: not taken).
    # Step 2: A C EOS .24 and A A EOS .126 finish; kept: B, A C. Best active A A B .084 < .24: stop.
    src, mask = one_source([3])
    (nbest,) = beam_search(ScriptedModel(SCRIPT, ONLY_EOS), src, mask, settings(2.0, 5, beam=2, n_best=2))
    assert [h.tokens for h in nbest] == [[B], [A, C]]
    assert [h.log_prob for h in nbest] == pytest.approx([math.log(0.26), math.log(0.24)], abs=1e-5)
    assert [h.score for h in nbest] == pytest.approx([h.log_prob for h in nbest])


def test_length_penalty_reorders_the_n_best() -> None:
    src, mask = one_source([3])
    model = ScriptedModel(SCRIPT, ONLY_EOS)
    (nbest,) = beam_search(model, src, mask, settings(2.0, 5, beam=2, length_penalty=1.0, n_best=2))
    assert [h.tokens for h in nbest] == [[A, C], [B]]
    # A C EOS has three scored tokens: lp = 8/6; B EOS has two: lp = 7/6.
    assert [h.score for h in nbest] == pytest.approx([math.log(0.24) / (8 / 6), math.log(0.26) / (7 / 6)], abs=1e-5)
    assert [h.log_prob for h in nbest] == pytest.approx([math.log(0.24), math.log(0.26)], abs=1e-5)


def test_finished_rule_stops_once_beam_hypotheses_have_ended() -> None:
    # Step 1: A .6 and EOS .3 are the first two: EOS finishes ([], score log .3 / 1). Step 2: A EOS .33 and
    # A C .27 are the first two: A EOS finishes (log .33 / (7/6)^2 = -0.81), the second: the sentence is done.
    src, mask = one_source([3])
    model = ScriptedModel(LONG, ONLY_EOS)
    (nbest,) = beam_search(model, src, mask, settings(2.0, 5, beam=2, length_penalty=2.0, n_best=2, stop="finished"))
    assert [h.tokens for h in nbest] == [[A], []]
    assert nbest[0].score == pytest.approx(math.log(0.33) / (7 / 6) ** 2, abs=1e-5)
    assert model.rows_per_step == [1, 2]  # the first step reads BOS once per sentence, then `beam` rows


def test_bound_rule_keeps_searching_and_prefers_the_long_output() -> None:
    # After step 2 the worst finished scores log .3 = -1.20, but A C, normalised at length 2, scores
    # log .27 / (7/6)^2 = -0.96: it could still win. A C D EOS (.231) scores log .231 / (9/6)^2 = -0.65 and does;
    # then A C D D (log .012 / (9/6)^2 = -1.96) cannot beat A EOS (-0.81): done after four steps.
    src, mask = one_source([3])
    model = ScriptedModel(LONG, ONLY_EOS)
    (nbest,) = beam_search(model, src, mask, settings(2.0, 5, beam=2, length_penalty=2.0, n_best=2, stop="bound"))
    assert [h.tokens for h in nbest] == [[A, C, D], [A]]
    assert nbest[0].log_prob == pytest.approx(math.log(0.6 * 0.45 * 0.9 * 0.95), abs=1e-5)
    assert model.rows_per_step == [1, 2, 2, 2]


@pytest.mark.parametrize("stop", STOPS)
def test_a_beam_wider_than_the_vocabulary_finds_every_finite_hypothesis(stop: str) -> None:
    # Beam 10 over 8 tokens: the first step has fewer candidates than beams, the missing beams start dead. The
    # script has six finite-probability outputs; all come back, best first, and nothing else does.
    src, mask = one_source([3])
    (nbest,) = beam_search(ScriptedModel(SCRIPT, ONLY_EOS), src, mask, settings(2.0, 5, beam=10, n_best=10, stop=stop))
    assert [h.tokens for h in nbest] == [[B], [A, C], [A], [B, A], [A, A], [A, A, B]]
    expected = [0.4 * 0.65, 0.6 * 0.4, 0.6 * 0.25, 0.4 * 0.35, 0.6 * 0.35 * 0.6, 0.6 * 0.35 * 0.4]
    assert [h.log_prob for h in nbest] == pytest.approx([math.log(p) for p in expected], abs=1e-5)


@pytest.mark.parametrize("stop", STOPS)
def test_both_rules_agree_without_penalty_on_the_script(stop: str) -> None:
    src, mask = one_source([3])
    (nbest,) = beam_search(ScriptedModel(SCRIPT, ONLY_EOS), src, mask, settings(2.0, 5, beam=2, n_best=2, stop=stop))
    assert [h.tokens for h in nbest] == [[B], [A, C]]


def search_case(name: str) -> tuple[Seq2Seq, torch.Tensor, torch.Tensor]:
    """A model and a batch to search: the script on one sentence, or 16 random sentences of varied lengths."""
    if name == "script":
        return ScriptedModel(SCRIPT, ONLY_EOS), *one_source([3])
    builders = {"toy GRU": ToyGRU, "ensemble": lambda: Ensemble([ToyGRU(seed=0), ToyGRU(seed=1)]),
                "transformer": lambda: real_model("transformer"), "rnn": lambda: real_model("rnn")}
    return builders[name](), *random_batch(16, seed=1)


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("name", ["script", "toy GRU", "ensemble", "transformer", "rnn"])
def test_beam_one_is_greedy(name: str, alpha: float, stop: str) -> None:
    """Greedy's tokens, log-probabilities and scores, for every kind of model, penalty and stopping rule."""
    model, src, mask = search_case(name)
    greedy = greedy_search(model, src, mask, settings(1.5, 3, length_penalty=alpha))
    beam = beam_search(model, src, mask, settings(1.5, 3, beam=1, length_penalty=alpha, stop=stop))
    assert [as_tuples([h]) for h in greedy] == [as_tuples(nbest) for nbest in beam]
    assert [h.score for h in greedy] == pytest.approx([nbest[0].score for nbest in beam], rel=1e-6)
    if name != "script":  # sentences end at varied lengths, so rows leave the batch at different steps
        assert len({len(h.tokens) for h in greedy}) > 3


@pytest.mark.parametrize("search", ["greedy", "beam finished", "beam bound", "ensemble finished", "ensemble bound"])
def test_same_result_alone_and_in_a_batch_of_64(search: str) -> None:
    model = ToyGRU() if not search.startswith("ensemble") else Ensemble([ToyGRU(seed=0), ToyGRU(seed=1)])
    src, mask = random_batch(64, seed=2)

    def run(s: torch.Tensor, m: torch.Tensor) -> list[list[Hypothesis]]:
        if search == "greedy":
            return [[h] for h in greedy_search(model, s, m, settings(1.2, 2))]
        return beam_search(model, s, m, settings(1.2, 2, beam=4, length_penalty=2.0, n_best=2, stop=search.split()[1]))

    batched = run(src, mask)
    lengths = mask.sum(1)
    for i in [int(lengths.argmin()), int(lengths.argmax()), 0, 17, 40, 63]:
        (alone,) = run(src[i:i + 1, :lengths[i]], mask[i:i + 1, :lengths[i]])
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-4)


def test_n_best_is_distinct_and_sorted() -> None:
    model = ToyGRU()
    src, mask = random_batch(8, seed=3)
    for nbest in beam_search(model, src, mask, settings(1.5, 3, beam=5, length_penalty=1.0, n_best=5)):
        assert len(nbest) == 5
        assert len({tuple(h.tokens) for h in nbest}) == 5
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
        for h in nbest:
            assert h.score == pytest.approx(h.log_prob / gnmt_penalty(len(h.tokens) + 1, 1.0), abs=1e-5)
            assert BOS_ID not in h.tokens and EOS_ID not in h.tokens


def test_attention_rows_cover_tokens_and_real_source() -> None:
    model = ToyGRU()
    src, mask = random_batch(6, seed=4)
    greedy = greedy_search(model, src, mask, settings(1.5, 3), return_attention=True)
    beam = beam_search(model, src, mask, settings(1.5, 3, beam=3, length_penalty=1.0, n_best=3), return_attention=True)
    for i, length in enumerate(mask.sum(1).tolist()):
        for h in [greedy[i], *beam[i]]:
            assert h.attention is not None and h.attention.shape == (len(h.tokens) + 1, length)
            assert torch.allclose(h.attention.sum(1), torch.ones(len(h.tokens) + 1), atol=1e-5)
    assert greedy_search(model, src, mask, settings(1.5, 3))[0].attention is None


@pytest.mark.parametrize("stop", STOPS)
def test_an_ensemble_of_one_model_twice_decodes_like_the_model(stop: str) -> None:
    src, mask = random_batch(16, seed=8)
    single = beam_search(ToyGRU(seed=0), src, mask, settings(1.5, 3, beam=3, length_penalty=1.0, n_best=3, stop=stop))
    twice = beam_search(Ensemble([ToyGRU(seed=0), ToyGRU(seed=0)]), src, mask,
                        settings(1.5, 3, beam=3, length_penalty=1.0, n_best=3, stop=stop))
    assert [[h.tokens for h in n] for n in single] == [[h.tokens for h in n] for n in twice]


def test_auto_decodes_at_the_untuned_penalty_and_each_stop_rule_is_its_own() -> None:
    model = ToyGRU()
    src, mask = random_batch(6, seed=9)
    auto = beam_search(model, src, mask, DecodeConfig(beam=3, length_penalty="auto", max_len_a=1.5, max_len_b=3))
    one = beam_search(model, src, mask, settings(1.5, 3, beam=3, length_penalty=1.0))
    assert [as_tuples(n) for n in auto] == [as_tuples(n) for n in one]
    with pytest.raises(ValueError, match="stop must be one of finished, bound"):
        beam_search(model, src, mask, settings(1.5, 3, beam=3, length_penalty=1.0, stop="early"))
    with pytest.raises(ValueError):
        beam_search(model, src, mask, settings(1.5, 3, beam=2, length_penalty=1.0, n_best=3))


def real_model(arch: str) -> Seq2Seq:
    from nmt.config import ModelConfig
    from nmt.models import build_model
    from nmt.tokenizer import VocabInfo

    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, d_model=32, heads=2, ffn_dim=64, encoder_layers=2, decoder_layers=2, emb_dim=32,
                      hidden_size=32, dropout=0.0)
    return build_model(cfg, VocabInfo(src_size=24, tgt_size=24, joint=True)).eval()


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_real_models_decode_a_sentence_alone_as_in_a_batch_of_64(arch: str) -> None:
    model = real_model(arch)
    src, mask = random_batch(64, seed=6)
    greedy = greedy_search(model, src, mask, settings(1.0, 2))
    beam = beam_search(model, src, mask, settings(1.0, 2, beam=3, length_penalty=1.0))
    lengths = mask.sum(1)
    for i in [int(lengths.argmin()), int(lengths.argmax()), 5]:
        s, m = src[i:i + 1, :lengths[i]], mask[i:i + 1, :lengths[i]]
        (alone,) = greedy_search(model, s, m, settings(1.0, 2))
        assert alone.tokens == greedy[i].tokens and alone.score == pytest.approx(greedy[i].score, abs=1e-4)
        (alone_beam,) = beam_search(model, s, m, settings(1.0, 2, beam=3, length_penalty=1.0))
        assert [h.tokens for h in alone_beam] == [h.tokens for h in beam[i]]
        assert [h.score for h in alone_beam] == pytest.approx([h.score for h in beam[i]], abs=1e-4)


def test_length_caps_stay_finite_and_within_the_positions():
    mask = torch.ones(2, 7, dtype=torch.bool)  # (B, S)
    mask[1, 3:] = False
    assert max_lengths(mask, 1.5, 10).tolist() == [20, 14]
    assert max_lengths(mask, 1e300, 10**6).tolist() == [2**31 - 1] * 2  # no overflow to a negative cap
    assert max_lengths(mask, 1e300, 10**6, max_positions=16).tolist() == [15, 15]  # BOS takes a position
    assert max_lengths(mask, 0.0, 0, max_positions=16).tolist() == [0, 0]


def teacher_forced(model: Seq2Seq, src: torch.Tensor, mask: torch.Tensor, tokens: list[int]) -> float:
    """The summed log-probability of `tokens` and EOS, read in one forward pass (an ensemble: its members' mean)."""
    members = list(model.members) if isinstance(model, Ensemble) else [model]
    tgt_in, tgt_out = torch.tensor([[BOS_ID, *tokens]]), torch.tensor([*tokens, EOS_ID])
    with torch.no_grad():
        log_probs = torch.stack([m(src, mask, tgt_in).log_softmax(-1)[0] for m in members]).mean(0)  # (T, V)
    return float(log_probs.gather(1, tgt_out[:, None]).sum())


@pytest.mark.parametrize("name", ["transformer", "rnn", "ensemble"])
def test_every_beam_hypothesis_has_the_log_prob_teacher_forcing_gives_it(name: str) -> None:
    """Beams that swap rows, sentences that leave: each hypothesis was scored with its own sentence and prefix."""
    model = (Ensemble([real_model("transformer"), real_model("rnn")]) if name == "ensemble" else real_model(name))
    src, mask = random_batch(8, seed=7)
    for i, nbest in enumerate(beam_search(model, src, mask, settings(1.5, 3, beam=4, length_penalty=1.0, n_best=4))):
        assert len(nbest) == 4
        for h in nbest:
            assert h.log_prob == pytest.approx(teacher_forced(model, src[i:i + 1], mask[i:i + 1], h.tokens), abs=1e-4)


def contains(tokens: list[int], term: list[int] | tuple[int, ...]) -> bool:
    return any(tuple(tokens[i:i + len(term)]) == tuple(term) for i in range(len(tokens) - len(term) + 1))


# D is the model's least favourite token: it says A and ends (.5 * .9), and says D last of all.
SHY = {(): {A: 0.5, B: 0.3, D: 0.02, EOS_ID: 0.18}}
SHY_AFTER = {EOS_ID: 0.9, A: 0.05, B: 0.03, D: 0.02}


def test_a_term_the_model_would_rather_not_emit_is_in_every_output() -> None:
    src, mask = one_source([3])
    model = ScriptedModel(SHY, SHY_AFTER)
    (plain,) = beam_search(model, src, mask, settings(2.0, 5, beam=4))
    assert plain[0].tokens == [A]
    (nbest,) = constrained_beam_search(model, src, mask, settings(2.0, 5, beam=4, n_best=4), [[[D]]])
    assert nbest[0].tokens == [D]  # the most probable output that says D: D EOS (.02 * .9)
    assert nbest[0].log_prob == pytest.approx(math.log(0.02 * 0.9), abs=1e-5)
    assert all(D in h.tokens and h.unmet == 0 for h in nbest)
    assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)


def test_a_term_of_several_subwords_appears_whole_and_in_order() -> None:
    src, mask = one_source([3])
    model = ScriptedModel({(): {A: 0.7, C: 0.1, D: 0.1, EOS_ID: 0.1}}, {EOS_ID: 0.6, A: 0.2, C: 0.1, D: 0.1})
    (nbest,) = constrained_beam_search(model, src, mask, settings(2.0, 5, beam=4, n_best=4), [[[D, C, D]]])
    assert nbest[0].tokens == [D, C, D]  # before A D C D: .1 * .1 * .1 * .6 against .7 * .1 * .1 * .1 * .6
    assert nbest[0].log_prob == pytest.approx(math.log(0.1**3 * 0.6), abs=1e-5)
    assert all(contains(h.tokens, [D, C, D]) and h.unmet == 0 for h in nbest)


def test_a_term_stands_as_a_whole_word_when_continuations_are_given() -> None:
    # The model would go on from the term D with C, a piece that continues a word ("stand" + "ing"): given C as a
    # continuation, the output holds D as a whole word; without, D C as the model likes it.
    src, mask = one_source([3])
    model = ScriptedModel({(): {D: 0.7, A: 0.2, EOS_ID: 0.1}, (D,): {C: 0.8, A: 0.1, EOS_ID: 0.1}},
                          {EOS_ID: 0.8, A: 0.1, B: 0.1})
    (free,) = constrained_beam_search(model, src, mask, settings(2.0, 5, beam=4), [[[D]]])
    assert free[0].tokens == [D, C]
    (whole,) = constrained_beam_search(model, src, mask, settings(2.0, 5, beam=4, n_best=4), [[[D]]],
                                       continuations=frozenset({C}))
    assert all(D in h.tokens and h.unmet == 0 for h in whole)
    assert not any(h.tokens[i:i + 2] == [D, C] for h in whole for i in range(len(h.tokens)))


def test_overlapping_terms_share_their_tokens() -> None:
    # Every token but EOS is as likely: the shortest output holding both terms wins, and A B C holds A B and B C.
    src, mask = one_source([3])
    model = ScriptedModel({}, {**dict.fromkeys([A, B, C, D], 0.19), EOS_ID: 0.24})
    for terms, best in [([[A, B], [B, C]], [A, B, C]), ([[A, B, C], [B]], [A, B, C]), ([[A, A], [A]], [A, A])]:
        (nbest,) = constrained_beam_search(model, src, mask, settings(2.0, 5, beam=6), [terms])
        assert nbest[0].tokens == best and nbest[0].unmet == 0


def test_at_the_length_cap_the_best_output_lacking_terms_is_returned_and_flagged() -> None:
    # One output token allowed and two one-token terms: no output can hold both. Those holding one (C before D,
    # the likelier) come first, then the one holding none; nothing ended before the cap (EOS is refused).
    src, mask = one_source([3])
    model = ScriptedModel({}, {A: 0.5, C: 0.1, D: 0.05, EOS_ID: 0.35})
    (nbest,) = constrained_beam_search(model, src, mask, settings(0.0, 1, beam=4, n_best=3), [[[C], [D]]])
    assert [(h.tokens, h.unmet) for h in nbest] == [([C], 1), ([D], 1), ([A], 2)]
    (capped,) = constrained_beam_search(model, src, mask, settings(0.0, 1, beam=4), [[[C, D]]])
    assert capped[0].unmet == 1 and len(capped[0].tokens) == 1


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("name", ["toy GRU", "ensemble", "transformer", "rnn"])
def test_without_terms_constrained_search_is_beam_search(name: str, stop: str) -> None:
    """Tokens, log-probabilities and scores alike."""
    model, src, mask = search_case(name)
    cfg = settings(1.5, 3, beam=4, length_penalty=1.0, n_best=3, stop=stop)
    plain = beam_search(model, src, mask, cfg)
    full = [[(h.tokens, h.log_prob, h.score, h.unmet) for h in n] for n in plain]
    empty = [[] for _ in range(src.size(0))]
    assert [[(h.tokens, h.log_prob, h.score, h.unmet) for h in n]
            for n in constrained_beam_search(model, src, mask, cfg, empty)] == full


def random_terms(count: int, seed: int, vocab: int = 24) -> list[list[list[int]]]:
    """Per sentence none, one or two terms of one to three tokens (no special ids)."""
    g = torch.Generator().manual_seed(seed)
    return [[torch.randint(4, vocab, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g).tolist()
             for _ in range(int(torch.randint(0, 3, (1,), generator=g)))] for _ in range(count)]


@pytest.mark.parametrize("name", ["transformer", "rnn", "ensemble"])
def test_constrained_hypotheses_hold_their_terms_and_the_log_prob_teacher_forcing_gives_them(name: str) -> None:
    model = (Ensemble([real_model("transformer"), real_model("rnn")]) if name == "ensemble" else real_model(name))
    src, mask = random_batch(8, seed=7)
    terms = random_terms(8, seed=1)
    results = constrained_beam_search(model, src, mask, settings(3.0, 6, beam=5, length_penalty=1.0, n_best=3), terms)
    assert sum(h.unmet == 0 for n in results for h in n) > 12
    for i, nbest in enumerate(results):
        for h in nbest:
            assert h.unmet == sum(not contains(h.tokens, term) for term in Constraints.of(terms[i]).terms)
            assert h.log_prob == pytest.approx(teacher_forced(model, src[i:i + 1], mask[i:i + 1], h.tokens), abs=1e-4)


@pytest.mark.parametrize("stop", STOPS)
def test_constrained_search_gives_a_sentence_alone_what_it_gives_it_in_a_batch(stop: str) -> None:
    model = ToyGRU()
    src, mask = random_batch(24, seed=2)
    terms = random_terms(24, seed=3)
    cfg = settings(2.0, 4, beam=4, length_penalty=1.0, n_best=2, stop=stop)
    batched = constrained_beam_search(model, src, mask, cfg, terms)
    lengths = mask.sum(1)
    for i in range(0, 24, 3):
        (alone,) = constrained_beam_search(model, src[i:i + 1, :lengths[i]], mask[i:i + 1, :lengths[i]], cfg,
                                           [terms[i]])
        assert [(h.tokens, h.unmet) for h in alone] == [(h.tokens, h.unmet) for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-4)


def vocabulary_rows(size: int, seed: int) -> list[torch.Tensor]:
    """(n, size) log-probability rows as the searches meet them: plain, with ties (rounded), with only EOS left
    (-inf elsewhere, as at the length cap), with a NaN, and with the maximum in the last entries."""
    g = torch.Generator().manual_seed(seed)
    plain = (3 * torch.randn(40, size, generator=g)).log_softmax(-1)  # (n, V)
    capped = torch.full_like(plain, float("-inf"))
    capped[:, EOS_ID] = plain[:, EOS_ID]
    broken, late = plain.clone(), plain.clone()
    broken[3, size // 2] = float("nan")
    late[:, -1] = 0.0
    return [plain, plain.round(decimals=1), torch.cat([plain[:20], capped[20:]]), broken, late]


@pytest.mark.parametrize("size", [24, 130, 1000, 8000, 8003])
def test_row_argmax_and_row_topk_give_torchs_own_indices_and_values(size: int) -> None:
    """Ties keep torch's order, NaN counts as the maximum, vocabularies need not fill whole blocks."""
    for x in vocabulary_rows(size, seed=size):
        assert torch.equal(row_argmax(x), x.argmax(dim=1))
        for k in (1, 2, 8, 10):
            values, indices = row_topk(x, k)
            expected_values, expected_indices = x.topk(k, dim=1)
            assert torch.equal(indices, expected_indices)
            assert torch.equal(values.nan_to_num(), expected_values.nan_to_num())
            assert values.is_contiguous() and indices.is_contiguous()  # as topk gives them: the searches view them


def test_beam_search_over_a_vocabulary_of_many_blocks_is_beam_search_with_torchs_topk(monkeypatch) -> None:
    """The vocabulary step's own top-k leaves the search's outputs as torch.topk gives them, bit for bit."""
    torch.manual_seed(0)
    model = ToyGRU(vocab=3000, eos_slope=3.0)
    src, mask = random_batch(12, seed=11, vocab=3000)
    cfg = settings(1.5, 3, beam=5, length_penalty=1.0, n_best=5)
    fast = beam_search(model, src, mask, cfg)
    monkeypatch.setattr("nmt.search.row_topk", lambda x, k: x.topk(k, dim=1))
    plain = beam_search(model, src, mask, cfg)
    assert [[(h.tokens, h.score, h.log_prob) for h in n] for n in fast] == [
        [(h.tokens, h.score, h.log_prob) for h in n] for n in plain]
