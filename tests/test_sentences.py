"""Sentence splitting (nmt.sentences): German edge cases, and whitespace and line breaks kept exactly."""

from __future__ import annotations

import functools
import random
import time

import pytest

from nmt import sentences
from nmt.errors import ConfigError
from nmt.sentences import MODES, one_line, split_mode

split = functools.partial(sentences.split, language="de")  # German rules: the cases below are German


@pytest.mark.parametrize(("text", "sentences"), [
    ("Viele Tiere, z. B. Hunde und Katzen, spielen. Das ist schön.",
     ["Viele Tiere, z. B. Hunde und Katzen, spielen.", "Das ist schön."]),
    ("Dr. Müller kommt heute. Er bringt Kuchen mit.", ["Dr. Müller kommt heute.", "Er bringt Kuchen mit."]),
    ("Herr Prof. Dr. Schmidt spricht. Alle hören zu.", ["Herr Prof. Dr. Schmidt spricht.", "Alle hören zu."]),
    ("Wir sehen uns am 3. Mai in Berlin. Dann fahren wir.", ["Wir sehen uns am 3. Mai in Berlin.", "Dann fahren wir."]),
    ("Am 24. Dezember ist Weihnachten.", ["Am 24. Dezember ist Weihnachten."]),
    ("Er sagte: „Ich komme morgen.“ Dann ging er.", ["Er sagte: „Ich komme morgen.“", "Dann ging er."]),
    ('Er sagte: "Ich komme." Sie lachte.', ['Er sagte: "Ich komme."', "Sie lachte."]),
    ("Er rief: «Komm!» Sie kam.", ["Er rief: «Komm!»", "Sie kam."]),
    ("Ich weiß nicht... Vielleicht morgen.", ["Ich weiß nicht...", "Vielleicht morgen."]),
    ("Ich weiß nicht … vielleicht morgen.", ["Ich weiß nicht … vielleicht morgen."]),
    ("Ein Hund läuft über die Wiese", ["Ein Hund läuft über die Wiese"]),
    ("Ein Hund läuft. Eine Katze schläft", ["Ein Hund läuft.", "Eine Katze schläft"]),
    ("Wo ist er? Hier! Gut.", ["Wo ist er?", "Hier!", "Gut."]),
    ("Die U.S. Navy testet ein Boot.", ["Die U.S. Navy testet ein Boot."]),
    ("Ein Mann arbeitet bei E.S.E. Electronics in Bonn.", ["Ein Mann arbeitet bei E.S.E. Electronics in Bonn."]),
    ("Das kostet 3,50 Euro. Am 1.1.2020 war es billiger.", ["Das kostet 3,50 Euro.", "Am 1.1.2020 war es billiger."]),
    ("Siehe S. 12 und Abs. 3 der Verordnung.", ["Siehe S. 12 und Abs. 3 der Verordnung."]),
    ("Er wohnt in der Hauptstr. 5 in Berlin.", ["Er wohnt in der Hauptstr. 5 in Berlin."]),
    # The price of the line above: a stop before a number is never taken as a sentence end (docs/translating.md).
    ("Ein Kind planscht. 2 Mädchen sitzen.", ["Ein Kind planscht. 2 Mädchen sitzen."]),
])
def test_german_sentences_split_where_a_reader_would(text, sentences):
    pieces = split(text)
    assert list(pieces.sentences) == sentences
    assert pieces.join(sentences) == text


def test_whitespace_line_breaks_and_empty_lines_are_kept_exactly_on_join():
    text = "  Ein Hund läuft.   Eine Katze schläft.\r\n\n\tZwei Kinder spielen.\n\n"
    pieces = split(text)
    assert pieces.sentences == ("Ein Hund läuft.", "Eine Katze schläft.", "Zwei Kinder spielen.")
    assert pieces.gaps == ("  ", "   ", "\r\n\n\t", "\n\n")
    assert pieces.join(["A dog runs.", "A cat sleeps.", "Two children play."]) == \
        "  A dog runs.   A cat sleeps.\r\n\n\tTwo children play.\n\n"


def test_line_breaks_end_sentences_unless_nonewlines_or_off():
    text = "Ein Mann\nmit Hut. Eine Frau."
    assert split(text, "on").sentences == ("Ein Mann", "mit Hut.", "Eine Frau.")
    assert split(text, "nonewlines").sentences == ("Ein Mann\nmit Hut.", "Eine Frau.")
    assert split("Ein Hund.\n\nEine Katze.", "nonewlines").sentences == ("Ein Hund.", "Eine Katze.")
    assert split(" " + text + "\n", "off") == split(" " + text + "\n", False)
    assert split(" " + text + "\n", "off").sentences == (text,)
    assert one_line("a\rb\u2028c\nd") == "a b c d"


@pytest.mark.parametrize("text", ["", "   ", "\n\n", " \r\n\t "])
def test_a_text_without_words_has_no_sentences_and_joins_to_itself(text):
    for mode in MODES:
        pieces = split(text, mode)
        assert pieces.sentences == () and pieces.join([]) == text


def test_any_text_joins_back_to_itself_in_every_mode():
    pieces = list("abcAB .!?…\"„“ \n\r\t\u2028zB.Dr3Mai") + ["z. B. ", "Dr. ", "3. Mai", "...", "\r\n", "\n\n"]
    rng = random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
        for mode in MODES:
            found = split(text, mode)
            assert found.join(list(found.sentences)) == text
            assert all(s and s == s.strip() for s in found.sentences)
            assert all(not gap.strip() for gap in found.gaps)
            assert len(found.gaps) == len(found.sentences) + 1
            assert mode != "on" or not any(one_line(s) != s for s in found.sentences)
            assert mode != "off" or len(found.sentences) == (1 if text.strip() else 0)


def test_unknown_modes_are_refused_with_the_choices():
    assert split_mode(True) == "on" and split_mode(False) == "off" and split_mode("nonewlines") == "nonewlines"
    with pytest.raises(ConfigError, match="split_sentences 'yes': choose on, off, nonewlines"):
        split("Ein Hund.", "yes")
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        split("Ein Hund. Eine Katze.").join(["A dog."])


@pytest.mark.parametrize("unit", ["„Hund ", "Hund。", "Hund？", "»Ein Hund« „läuft. "])
def test_a_megabyte_line_of_unclosed_quotes_or_unspaced_sentence_ends_is_split_in_seconds(unit):
    text = unit * (1_000_000 // len(unit))
    start = time.monotonic()
    pieces = split(text, "nonewlines")
    assert time.monotonic() - start < 30  # the segmenter alone took minutes on such a line
    assert pieces.join(pieces.sentences) == text and max(map(len, pieces.sentences)) <= sentences.WINDOW


def test_a_long_text_splits_as_it_would_in_one_piece(monkeypatch):
    rng = random.Random(5)
    words = "Der Hund läuft z. B. am 3. Mai „schnell“ nach Hause. Dr. Müller sagt: „Ja!“ Warum? Weil.".split()
    text = " ".join(rng.choice(words) for _ in range(3000))  # several windows of the segmenter
    windowed = split(text, "nonewlines")
    monkeypatch.setattr(sentences, "WINDOW", len(text) + 1)
    assert split(text, "nonewlines") == windowed and len(windowed.sentences) > 100
