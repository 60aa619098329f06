"""Sampling invariants: seeded runs repeat, top-k 1 and a temperature near 0 are greedy, the full distribution and
the nucleus are sampled with the model's probabilities, per-batch seeds ignore thread count, and the Python
API, nmt-translate and the engines take or refuse sampling as documented."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nmt.cli import translate_main
from nmt.config import DecodeConfig, decode_with
from nmt.engines.ctranslate2 import CTranslate2Engine
from nmt.engines.pytorch import TorchEngine
from nmt.errors import ConfigError
from nmt.loader import load_translator
from nmt.search import Ensemble, greedy_search, sample_search, sampling_distribution
from nmt.tokenizer import BOS_ID, EOS_ID
from nmt.translator import check_abilities
from tests.conftest import fails_cleanly, untrained_run
from tests.test_search import (
    SCRIPT,
    A,
    B,
    C,
    ScriptedModel,
    ToyGRU,
    as_tuples,
    one_source,
    random_batch,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

# every output of SCRIPT (EOS only after these prefixes) and its probability
SCRIPT_OUTPUTS = {(A, C): 0.6 * 0.4, (A, A): 0.6 * 0.35 * 0.6, (A, A, B): 0.6 * 0.35 * 0.4, (A,): 0.6 * 0.25,
                  (B,): 0.4 * 0.65, (B, A): 0.4 * 0.35}


def sampling(seed: int = 0, **more) -> DecodeConfig:
    """Sampling settings with the test searches' length limits and no length penalty."""
    return DecodeConfig(**{"beam": 1, "length_penalty": 0.0, "max_len_a": 1.5, "max_len_b": 3, "sampling": True,
                           "seed": seed, **more})


def draws(model, count: int, cfg: DecodeConfig) -> Counter:
    """How often each output comes out of `count` sentences sampled in one batch."""
    src, mask = one_source([3] * count)
    return Counter(tuple(h.tokens) for h in sample_search(model, src, mask, cfg))


def within(counts: Counter, probabilities: dict[tuple[int, ...], float], count: int) -> None:
    """Every output's frequency lies within 4.5 standard deviations of its probability; nothing else comes out."""
    assert set(counts) <= set(probabilities)
    for output, p in probabilities.items():
        sd = math.sqrt(p * (1 - p) / count)
        assert abs(counts[output] / count - p) <= 4.5 * sd, (output, counts[output] / count, p)


@pytest.mark.parametrize("name", ["toy GRU", "ensemble"])
def test_the_same_seed_gives_the_same_samples_and_another_seed_others(name: str) -> None:
    model = ToyGRU() if name == "toy GRU" else Ensemble([ToyGRU(seed=0), ToyGRU(seed=1)])
    src, mask = random_batch(16, seed=3)
    first = sample_search(model, src, mask, sampling(seed=7))
    again = sample_search(model, src, mask, sampling(seed=7))
    other = sample_search(model, src, mask, sampling(seed=8))
    assert as_tuples(first) == as_tuples(again)
    assert as_tuples(first) != as_tuples(other)


@pytest.mark.parametrize("settings", [{"top_k": 1}, {"temperature": 1e-4}, {"top_p": 1e-6}])
@pytest.mark.parametrize("name", ["script", "toy GRU", "ensemble"])
def test_top_k_one_a_temperature_near_zero_and_a_tiny_nucleus_are_greedy(name: str, settings: dict) -> None:
    if name == "script":
        model, (src, mask) = ScriptedModel(SCRIPT, {EOS_ID: 1.0}), one_source([3])
    else:
        model = ToyGRU() if name == "toy GRU" else Ensemble([ToyGRU(seed=0), ToyGRU(seed=1)])
        src, mask = random_batch(16, seed=1)
    greedy = greedy_search(model, src, mask, DecodeConfig(beam=1, length_penalty=1.0, max_len_a=1.5, max_len_b=3))
    for seed in (0, 1):
        sampled = sample_search(model, src, mask, sampling(seed, length_penalty=1.0, **settings))
        assert as_tuples(sampled) == as_tuples(greedy)
        assert [h.score for h in sampled] == [h.score for h in greedy]


def test_sampling_the_full_distribution_draws_each_output_as_often_as_the_model_gives_it() -> None:
    count = 4000
    counts = draws(ScriptedModel(SCRIPT, {EOS_ID: 1.0}), count, sampling(seed=1, top_k=0, top_p=1.0))
    assert sum(SCRIPT_OUTPUTS.values()) == pytest.approx(1.0)
    within(counts, SCRIPT_OUTPUTS, count)


def test_a_temperature_flattens_the_first_token_as_its_power_does() -> None:
    count = 4000
    counts = draws(ScriptedModel(SCRIPT, {EOS_ID: 1.0}), count, sampling(seed=2, temperature=2.0))
    first = Counter({token: sum(n for output, n in counts.items() if output[0] == token) for token in (A, B)})
    a, b = math.sqrt(0.6), math.sqrt(0.4)
    within(Counter({(A,): first[A], (B,): first[B]}), {(A,): a / (a + b), (B,): b / (a + b)}, count)


def test_a_small_top_p_keeps_only_the_nucleus_renormalized() -> None:
    # nucleus 0.5: A (0.6) first; after A, C (0.4) and A (0.35, mass before it 0.4); after A A, EOS (0.6)
    count = 4000
    counts = draws(ScriptedModel(SCRIPT, {EOS_ID: 1.0}), count, sampling(seed=3, top_p=0.5))
    within(counts, {(A, C): 0.4 / 0.75, (A, A): 0.35 / 0.75}, count)


def test_top_k_keeps_the_k_most_probable_renormalized() -> None:
    log_probs = torch.tensor([[0.1, 0.5, 0.15, 0.25], [0.4, 0.3, 0.2, 0.1]]).log()  # (2, 4)
    probs = sampling_distribution(log_probs, temperature=1.0, top_k=2, top_p=1.0)  # (2, 4)
    expected = [0.0, 0.5 / 0.75, 0.0, 0.25 / 0.75, 0.4 / 0.7, 0.3 / 0.7, 0.0, 0.0]
    assert probs.view(-1).tolist() == pytest.approx(expected)


def stepped_log_prob(model, src: torch.Tensor, mask: torch.Tensor, tokens: list[int]) -> float:
    """The summed log-probability of `tokens` and EOS, read one step at a time (PAD, which a toy model may emit,
    included)."""
    with torch.inference_mode():
        state = model.init_state(model.encode(src, mask), mask)
        total = 0.0
        for prev, token in zip([BOS_ID, *tokens], [*tokens, EOS_ID], strict=True):
            log_probs, state = model.step(torch.tensor([prev]), state)
            total += float(log_probs[0, token])
    return total


def test_a_sample_holds_the_models_own_log_probability_whatever_the_temperature() -> None:
    model = ToyGRU()
    src, mask = random_batch(8, seed=4)
    for hyp, s, m in zip(sample_search(model, src, mask, sampling(seed=5, temperature=1.7, top_p=0.9)), src, mask,
                         strict=True):
        assert hyp.log_prob == pytest.approx(stepped_log_prob(model, s[None], m[None], hyp.tokens), abs=1e-4)


def test_the_engine_samples_the_same_on_one_thread_as_on_two() -> None:
    engine = TorchEngine(ToyGRU(), torch.device("cpu"))
    src, mask = random_batch(24, seed=6)
    sources = [row[m].numpy().astype(np.int64) for row, m in zip(src, mask, strict=True)]
    cfg = decode_with(sampling(seed=9), {"batch_tokens": 40})
    one = [as_tuples(hyps) for hyps in engine.search(sources, cfg)]
    torch.set_num_threads(2)  # two batches searched side by side (the fixture restores the count)
    assert [as_tuples(hyps) for hyps in engine.search(sources, cfg)] == one


@pytest.mark.parametrize(("changes", "message"), [
    ({"sampling": True}, "decode.beam (5) must be 1 with decode.sampling"),
    ({"sampling": True, "beam": 1, "n_best": 2}, "decode.n_best (2) cannot exceed decode.beam (1)"),
    ({"temperature": 0.0}, "decode.temperature: got 0.0"),
    ({"temperature": -1.0}, "decode.temperature: got -1.0"),
    ({"top_p": 0.0}, "decode.top_p: got 0.0, allowed: a number in (0, 1]"),
    ({"top_p": 1.5}, "decode.top_p: got 1.5"),
    ({"top_k": -1}, "decode.top_k: got -1"),
    ({"top_k": 2.5}, "decode.top_k: got 2.5, expected an integer"),
    ({"sampling": "yes"}, "decode.sampling: got 'yes', expected true or false"),
    ({"seed": -3}, "decode.seed: got -3"),
])
def test_impossible_sampling_settings_are_refused(changes, message):
    with pytest.raises(ConfigError) as err:
        decode_with(DecodeConfig(), changes)
    assert message in str(err.value)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> Path:
    return untrained_run(tmp_path_factory.mktemp("sampling"), "sampling", decode={"max_len_a": 0.0, "max_len_b": 8})


LINES = ["Ein Mann fährt Fahrrad.", "Zwei Kinder spielen im Park.", "Eine Frau liest ein Buch."]


def test_the_python_api_samples_by_keyword_settings_and_repeats_a_seed(untrained) -> None:
    translator = load_translator([untrained], torch.device("cpu"))
    first = translator.translate(LINES, sampling=True, beam=1, seed=1, top_p=0.95)
    assert translator.translate(LINES, sampling=True, beam=1, seed=1, top_p=0.95) == first
    assert translator.translate(LINES, sampling=True, beam=1, seed=2, top_p=0.95) != first
    assert translator.translate(LINES, sampling=True, beam=1, top_k=1) == translator.translate(LINES, beam=1)
    with pytest.raises(ConfigError, match="decode.sampling"):
        translator.translate(LINES[0], sampling=True, beam=1, glossary={"Mann": "man"})


def test_nmt_translate_samples_by_flags_and_refuses_sampling_in_a_beam(untrained, tmp_path, capsys) -> None:
    src = tmp_path / "in.de"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    outputs = []
    for name in ("a.en", "b.en"):
        argv = ["-c", str(untrained), "-i", str(src), "-o", str(tmp_path / name), "--sampling", "--beam", "1",
                "--seed", "4", "--temperature", "1.5", "--top-k", "20"]
        assert translate_main(argv) == 0
        outputs.append((tmp_path / name).read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == len(LINES)
    capsys.readouterr()
    fails_cleanly(translate_main, ["-c", str(untrained), "-i", str(src), "-o", str(tmp_path / "c.en"), "--sampling",
                                   "--beam", "3"], capsys, tmp_path, "--beam (3) must be 1 with --sampling")
    fails_cleanly(translate_main, ["-c", str(untrained), "-i", str(src), "-o", str(tmp_path / "c.en"), "--sampling",
                                   "--beam", "1", "--top-p", "0"], capsys, tmp_path, "--top-p: got 0.0")


def test_an_engine_that_cannot_sample_refuses_sampling_in_one_line() -> None:
    engine = SimpleNamespace(name="ctranslate2", abilities=CTranslate2Engine.abilities)
    with pytest.raises(ConfigError, match="--sampling: the ctranslate2 engine does not sample"):
        check_abilities(engine, DecodeConfig(beam=1, sampling=True), lambda key: "--" + key.replace("_", "-"))
    check_abilities(engine, DecodeConfig(beam=1))
    torch_engine = SimpleNamespace(name="pytorch", abilities=TorchEngine.abilities)
    check_abilities(torch_engine, DecodeConfig(beam=1, sampling=True))


def test_a_sampling_server_samples_and_refuses_glossaries_in_one_line(untrained) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmt.serve.app import Limits, create_app

    translator = load_translator([untrained], torch.device("cpu"), changes={"sampling": True, "beam": 1, "seed": 5})
    with TestClient(create_app(translator, Limits())) as client:
        answer = client.post("/translate", json={"src": LINES})
        assert answer.status_code == 200
        assert answer.json()["translations"] == translator.translate(LINES)
        refused = client.post("/translate", json={"src": LINES[:1], "glossary": {"Mann": "man"}})
        assert refused.status_code == 422 and "this server samples" in refused.json()["error"]
        assert client.post("/translate", json={"src": LINES[:1], "beam": 2}).status_code == 422
