"""nmt.markup with scripted translators: markup comes back as written (checked with the standard library's
parsers), inline tags follow the word alignment given and keep their order and balance whatever it says, ignored
elements are left alone, and malformed or hostile documents give one MarkupError or a correct result."""

from __future__ import annotations

import math
import random
import re
import time
import xml.etree.ElementTree as ElementTree
from html.parser import HTMLParser

import httpx
import numpy as np
import pytest

from nmt.errors import MarkupError
from nmt.markup import FORMATS, MAX_DOCUMENT_CHARS, Aligned, translate_document, word_weights


def same(sentences: list[str]) -> list[Aligned]:
    """Each sentence as its own translation, word for word."""
    return [Aligned(s, np.eye(len(s.split()))) for s in sentences]


def upper(sentences: list[str]) -> list[Aligned]:
    return [Aligned(s.upper(), np.eye(len(s.split()))) for s in sentences]


def scripted(table: dict[str, tuple[str, list[int]]]):
    """A translator from a table: sentence -> (translation, the source word each target word comes from)."""
    def translate(sentences: list[str]) -> list[Aligned]:
        out = []
        for sentence in sentences:
            text, links = table[sentence]
            weights = np.zeros((len(text.split()), len(sentence.split())))
            weights[np.arange(len(links)), links] = 1.0
            out.append(Aligned(text, weights))
        return out
    return translate


def shuffled(seed: int):
    """Translations that reverse the words, with random alignments."""
    rng = np.random.default_rng(seed)

    def translate(sentences: list[str]) -> list[Aligned]:
        return [Aligned(" ".join(reversed(s.split())), rng.random((len(s.split()), len(s.split()))))
                for s in sentences]
    return translate


class Tags(HTMLParser):
    """The tags of a document in order, as the standard library's HTML parser reads them."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(self.get_starttag_text())

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.tags.append(self.get_starttag_text())

    def handle_endtag(self, tag: str) -> None:
        self.tags.append(f"</{tag}>")


def balanced(tags: list[str]) -> bool:
    stack = []
    for tag in tags:
        if tag.startswith("</"):
            if not stack or stack.pop() != tag[2:-1]:
                return False
        elif not tag.endswith("/>") and tag[1:].split()[0].rstrip(">") not in ("img", "br"):
            stack.append(tag[1:].split()[0].rstrip(">"))
    return not stack


PAGE = ("<!DOCTYPE html>\n<html lang=de><head><title>Hunde &amp; Katzen</title></head>\n<body>\n"
        "<h1 class='x'>Zwei <em>gro&#223;e</em> Hunde</h1>\n<!-- ein Kommentar -->\n"
        "<p>Ein <a href=\"/a?x=1&amp;y=2\" title='T&uuml;r'>Mann &amp; <b>sein</b> Hund</a> laufen.<br>"
        "Eine Frau <i>sitzt</i>.</p>\n<ul><li>Erstens</li><li>Zweitens <img src=a.png alt=Bild> hier</li></ul>\n"
        "</body></html>\n")


def test_a_word_for_word_translation_gives_the_document_back_byte_for_byte():
    assert translate_document(PAGE, "html", same) == PAGE
    fragment = 'Ein <b a="1">gro&#223;er</b> &amp; <x/>Hund<!-- c --> <?pi x?>mit &lt;Ball&gt;.'
    assert translate_document(fragment, "xml", same) == fragment
    document = '<?xml version="1.0" encoding="utf-8"?>\n<doc>\n  <t>Ein <b>Hund</b></t>\n</doc>\n'
    assert translate_document(document, "xml", same) == document


def test_text_is_translated_and_tags_attributes_and_entities_come_back_as_written():
    out = translate_document(PAGE, "html", upper)
    assert Tags(out).tags == Tags(PAGE).tags
    assert "<h1 class='x'>ZWEI <em>GROSSE</em> HUNDE</h1>" in out  # "ß" has no entity of its own in the output
    assert '<a href="/a?x=1&amp;y=2" title=\'T&uuml;r\'>MANN &amp; <b>SEIN</b> HUND</a> LAUFEN.' in out
    assert "<!-- ein Kommentar -->" in out and "<title>HUNDE &amp; KATZEN</title>" in out
    assert "<li>ZWEITENS <img src=a.png alt=Bild> HIER</li>" in out


def test_an_inline_tag_surrounds_the_target_words_aligned_to_its_source_words():
    translate = scripted({"Ein großer Hund": ("A big dog", [0, 1, 2]),
                          "Ich habe den Hund gesehen": ("I have seen the dog", [0, 1, 4, 2, 3]),
                          "Das Haus ist rot": ("The house is red", [0, 1, 2, 3])})
    assert translate_document("<p>Ein <b>großer</b> Hund</p>", "html", translate) == "<p>A <b>big</b> dog</p>"
    assert translate_document("Ich habe <i>den Hund</i> gesehen", "html", translate) == \
        "I have seen <i>the dog</i>"
    assert translate_document("<p>Das <b>Haus</b> ist <i>rot</i></p>", "xml", translate) == \
        "<p>The <b>house</b> is <i>red</i></p>"
    # a tag around words whose translations move apart covers the words between them
    assert translate_document("Ich <b>habe den</b> Hund gesehen", "html", translate) == \
        "I <b>have seen the</b> dog"


def test_tags_keep_their_order_and_balance_whatever_the_alignment():
    document = ("<p>Ein <b>sehr <i>großer</i> und</b> <a href='#'>lauter <span>Hund</span></a> bellt "
                "<u>hier</u> <img src=x> laut<b></b> heute <em>im <strong>Park</strong></em>.</p>")
    for seed in range(20):
        out = translate_document(document, "html", shuffled(seed))
        assert Tags(out).tags == Tags(document).tags
        assert balanced(Tags(out).tags)
        ElementTree.fromstring(out.replace("<img src=x>", "<img/>").replace("href='#'", ""))


def test_text_in_code_pre_translate_no_and_ignored_elements_is_left_alone():
    seen: list[str] = []

    def translate(sentences: list[str]) -> list[Aligned]:
        seen.extend(sentences)
        return upper(sentences)

    document = ("<p>Ein Satz <code>x = y</code> und mehr</p><pre>  Vor  <b>formatiert</b></pre>"
                "<div translate=\"no\">Nicht <b>das</b></div><p translate='yes'>Dies ja</p>"
                "<keep>Nein <b>nein</b></keep>"
                "<script>var a = '<p>x</p>';</script><style>p { color: red }</style>")
    out = translate_document(document, "html", translate, ignore_tags={"keep"})
    assert out == ("<p>EIN SATZ <code>x = y</code> UND MEHR</p><pre>  Vor  <b>formatiert</b></pre>"
                   "<div translate=\"no\">Nicht <b>das</b></div><p translate='yes'>DIES JA</p>"
                   "<keep>Nein <b>nein</b></keep><script>var a = '<p>x</p>';</script><style>p { color: red }</style>")
    assert seen == ["Ein Satz", "und mehr", "Dies ja"]
    xml_doc = "<d><t>Ein Hund</t><code>Kein Hund</code><t translate='no'>Auch <b>nicht</b></t></d>"
    assert translate_document(xml_doc, "xml", upper) == \
        "<d><t>EIN HUND</t><code>Kein Hund</code><t translate='no'>Auch <b>nicht</b></t></d>"


def test_without_an_alignment_inline_tags_go_to_the_edges_of_their_sentence():
    def plain(sentences: list[str]) -> list[Aligned]:
        return [Aligned({"Ein großer Hund": "A big dog"}[s]) for s in sentences]

    assert translate_document("<p>Ein <b>großer</b> Hund</p>", "html", plain) == "<p><b>A big dog</b></p>"
    assert translate_document("Ein <br/>großer Hund<img src='x'/>", "xml", plain) == \
        "<br/>A big dog<img src='x'/>"


def test_a_sentence_translated_to_nothing_keeps_its_inline_tags_balanced():
    def empty(sentences: list[str]) -> list[Aligned]:
        return [Aligned("", np.zeros((0, len(s.split())))) for s in sentences]  # no target word: a (0, S) alignment

    assert translate_document("<p>Ein <b>großer</b> Hund</p>", "html", empty) == "<p><b></b></p>"


def test_a_tag_across_sentences_stays_balanced_and_whitespace_between_sentences_is_kept():
    def two(text: str) -> list[tuple[int, int]]:
        cut = text.index(".") + 1
        start = cut + len(text[cut:]) - len(text[cut:].lstrip())
        return [(len(text) - len(text.lstrip()), cut), (start, len(text.rstrip()))]

    document = "<p> Ein <b>Hund. \n  Eine</b> Katze. </p>"
    out = translate_document(document, "html", upper, split=two)
    assert out == "<p> EIN <b>HUND. \n  EINE</b> KATZE. </p>"
    out = translate_document(document, "html", shuffled(1), split=two)
    assert Tags(out).tags == Tags(document).tags and "\n  " in out


def test_not_well_formed_xml_is_one_markup_error_naming_the_place():
    for document, message in (("<p>Ein <b>Hund</p>", "at line 1, column 17: mismatched tag"),
                              ("<p>Ein\n <b>Hund", ": <b> at line 2, column 2 is not closed"),
                              ("Hund &nbsp; Katze", "at line 1, column 6: undefined entity"),
                              ("<a></b>", "at line 1, column 6: mismatched tag")):
        with pytest.raises(MarkupError, match=f"^not well-formed XML ?{message}$"):
            translate_document(document, "xml", upper)
    with pytest.raises(MarkupError, match="format 'pdf'"):
        translate_document("x", "pdf", upper)


def test_html_with_unclosed_and_stray_tags_comes_back_as_written():
    document = "<p>Ein <b>großer Hund<p>Zwei</i> Katzen</div><li>Drei"
    out = translate_document(document, "html", upper)
    assert out == "<p>EIN <b>GROSSER HUND<p>ZWEI</i> KATZEN</div><li>DREI"


def test_entity_bombs_do_not_expand():
    bomb = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i > 1 else "&lol;" * 10}">'
                      for i in range(1, 10)) + ']><lolz>&lol9;</lolz>')
    with pytest.raises(MarkupError, match="declares entities"):
        translate_document(bomb, "xml", upper)
    out = translate_document(bomb.replace('<?xml version="1.0"?>', ""), "html", same)
    assert out == bomb.replace('<?xml version="1.0"?>', "")  # html.parser never expands declared entities
    external = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>'
    with pytest.raises(MarkupError, match="declares entities"):
        translate_document(external, "xml", upper)


@pytest.mark.parametrize("format", ["html", "xml"])
def test_ten_thousand_nested_elements_are_translated_with_their_tags(format):
    document = "<div>" * 10_000 + "Ein Hund" + "</div>" * 10_000
    assert translate_document(document, format, upper) == "<div>" * 10_000 + "EIN HUND" + "</div>" * 10_000
    if format == "html":  # the same ten thousand inline elements around one sentence
        inline = "<p>" + "<b>" * 10_000 + "Ein Hund" + "</b>" * 10_000 + "</p>"
        assert translate_document(inline, format, shuffled(0)) == inline.replace("Ein Hund", "Hund Ein")


@pytest.mark.parametrize("document", ["<p></p>", "<br/>", "<p> <b> </b> </p>", "<!-- nur -->", " ", "", "<a><b/></a>"])
def test_a_document_without_text_comes_back_unchanged_and_nothing_is_translated(document):
    def never(sentences: list[str]) -> list[Aligned]:
        raise AssertionError(sentences)

    for format in ("html", "xml"):
        assert translate_document(document, format, never) == document


def test_word_weights_sum_subword_attention_into_words():
    weights = np.arange(20, dtype=float).reshape(4, 5)  # 3 target pieces and EOS; 4 source pieces and EOS
    out = word_weights(["▁Ein", "▁groß", "er", "▁Hund", "</s>"], ["▁A", "▁big", "▁dog", "</s>"], weights, 3, 3)
    assert out.tolist() == [[0, 3, 3], [5, 13, 8], [10, 23, 13]]


def test_random_documents_round_trip_word_for_word():
    rng = random.Random(7)
    tags = ["b", "i", "span", "a", "em"]
    for _ in range(50):
        parts, stack = [], []
        for _ in range(rng.randint(1, 30)):
            roll = rng.random()
            if roll < 0.2:
                name = rng.choice(tags)
                parts.append(f"<{name}>")
                stack.append(name)
            elif roll < 0.35 and stack:
                parts.append(f"</{stack.pop()}>")
            else:
                parts.append(rng.choice(["Hund ", "Katze", " &amp; ", " und ", "Ball."]))
        document = "<p>" + "".join(parts) + "".join(f"</{name}>" for name in reversed(stack)) + "</p>"
        out = translate_document(document, "html", shuffled(rng.randint(0, 99)))
        assert Tags(out).tags == Tags(document).tags
        assert sorted(out.replace("<", " <").replace(">", "> ").split()) != [] and balanced(Tags(out).tags)


@pytest.fixture(scope="module")
def translator(trained_run):
    from nmt.loader import load_translator

    return load_translator(trained_run, "cpu")


def test_a_trained_model_translates_a_document_as_its_plain_text_with_every_tag_kept(translator):
    document = "<p>Ein <b>Mann</b> fährt <i class='x'>Fahrrad</i>.</p>\n<p>Zwei <em>Hunde</em> spielen.</p>"
    out = translator.translate_markup(document, "html")
    assert Tags(out).tags == Tags(document).tags
    paragraphs = [ElementTree.fromstring(p).itertext() for p in out.split("\n")]
    assert ["".join(p) for p in paragraphs] == translator.translate(["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen."])


def test_a_document_s_confidence_is_the_token_weighted_mean_over_the_sentences_it_translated(translator):
    document = ("<p>Ein <b>Mann</b> fährt Fahrrad. Zwei Hunde spielen.</p><pre>Ein Hund.</pre>"
                "<p translate='no'>Eine Frau.</p>")
    doc = translator.translate_markup_scored(document, "html")
    found = [translator.translate_nbest(s)[0] for s in ("Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.")]
    assert doc.text == translator.translate_markup(document, "html")
    assert doc.tokens == sum(t.tokens for t in found)  # the kept pre and translate="no" text is not scored
    assert doc.log_prob == pytest.approx(sum(t.log_prob for t in found), abs=1e-4)
    assert doc.confidence == pytest.approx(math.exp(sum(t.log_prob for t in found) / doc.tokens), abs=1e-5)
    nothing = translator.translate_markup_scored("<p><code>x = 1</code></p>", "html")
    assert nothing.tokens == 0 and math.isnan(nothing.confidence)


def test_the_alignment_has_a_row_per_target_word_and_a_column_per_source_word(translator):
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei kleine Hunde spielen im Schnee.", ""]
    results = translator.aligned(sentences)
    assert [r.text for r in results] == translator.translate(sentences)
    for sentence, result in zip(sentences[:2], results):
        assert result.weights.shape == (len(result.text.split()), len(sentence.split()))
        assert np.all(result.weights >= 0) and np.all(result.weights.sum(axis=1) > 0)  # each word attends
    assert results[2] == Aligned("")
    for layer in (1, -1):
        assert translator.aligned(sentences[:1], layer=layer)[0].weights.shape == results[0].weights.shape


@pytest.fixture(scope="module")
def service(translator):
    from nmt.serve.limits import Limits
    from nmt.serve.service import create_service
    from tests.test_serve import TestClient

    with TestClient(create_service(translator, Limits(max_chars=200_000))) as client:
        yield client


BOMB = ('<!DOCTYPE lolz [<!ENTITY lol "lol">' + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10}">'
                                                       for i in range(2, 10)) + "]><lolz>&lol9;</lolz>")
HOSTILE = {"unclosed": "<p>Ein <b>Hund", "bomb": BOMB, "nested": "<div>" * 10_000 + "Ein Hund." + "</div>" * 10_000,
           "tags only": "<p><br/><img src='x'/></p>", "stray end": "</b>Ein Hund.</i>"}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_documents_get_a_translation_or_the_apis_own_error_and_the_server_stays_healthy(service, name):
    document = HOSTILE[name]
    deepl_key = {"Authorization": "DeepL-Auth-Key any-key-will-do"}
    for handling in ("xml", "html"):
        answer = service.post("/v2/translate", json={"text": [document], "target_lang": "EN-US",
                                                     "tag_handling": handling}, headers=deepl_key)
        if answer.status_code == 400:  # only XML refuses: a malformed document, or one that declares entities
            assert handling == "xml" and set(answer.json()) == {"message"}, answer.text
            assert "not well-formed XML" in answer.json()["message"] or "declares entities" in answer.json()["message"]
        else:
            assert answer.status_code == 200, answer.text
            assert Tags(answer.json()["translations"][0]["text"]).tags == Tags(document).tags
            assert "lollol" not in answer.text
    answer = service.post("/libretranslate/translate", json={"q": document, "source": "de", "target": "en",
                                                             "format": "html"})
    assert answer.status_code == 200 and Tags(answer.json()["translatedText"]).tags == Tags(document).tags
    assert service.get("/health").status_code == 200


def recording():
    """A word-for-word translator that keeps every sentence it is given."""
    seen: list[str] = []

    def translate(sentences: list[str]) -> list[Aligned]:
        seen.extend(sentences)
        return upper(sentences)
    return translate, seen


UNTERMINATED = {"comment": "<!-- Notiz: der Hund ist krank", "tag": '<a href="/katze" title="Die Katze schläft',
                "cdata": "<![CDATA[ Die Katze schläft", "pi": "<?php echo 'Die Katze schläft';",
                "end tag": "</p Die Katze schläft", "declaration": "<!DOCTYPE Die Katze schläft",
                "script": "<script>var katze = 'Die Katze schläft';"}


@pytest.mark.parametrize("name", UNTERMINATED)
def test_an_unterminated_construct_is_kept_as_written_in_html_refused_in_xml_and_never_translated(name):
    tail = UNTERMINATED[name]
    translate, seen = recording()
    out = translate_document("<p>Ein Hund läuft.</p>" + tail, "html", translate)
    assert out == "<p>EIN HUND LÄUFT.</p>" + tail and seen == ["Ein Hund läuft."]
    translate, seen = recording()
    with pytest.raises(MarkupError, match="not well-formed XML"):
        translate_document("<p>Ein Hund läuft.</p>" + tail, "xml", translate)
    assert seen == []


@pytest.mark.parametrize("document", ["<p>Ein Hund <![ läuft.</p>", "<![123[x]]>", "<p>x</p><![ ]>"])
def test_every_html_parser_failure_is_a_markup_error_naming_the_place(document):
    with pytest.raises(MarkupError, match=r"HTML that cannot be read at line 1, column \d+"):
        translate_document(document, "html", upper)


def test_text_after_a_reference_html_parser_would_stop_at_is_read_on():
    translate, seen = recording()
    document = "<p>Straße &amp; Weg &#223;</p><p>Ein &#xZZ; Hund läuft.</p><p>Die Katze &am"
    assert translate_document(document, "html", translate) == ("<p>STRASSE &amp; WEG SS</p><p>EIN &amp;#XZZ; HUND "
                                                                "LÄUFT.</p><p>DIE KATZE &am")
    assert seen == ["Straße & Weg ß", "Ein &#xZZ; Hund läuft.", "Die Katze"]


@pytest.mark.parametrize("encoding", ["ISO-8859-1", "UTF-16", "nonsense"])
def test_xml_text_given_as_unicode_is_read_as_such_whatever_its_declaration_says(encoding):
    translate, seen = recording()
    document = f'<?xml version="1.0" encoding="{encoding}"?><p>Die Straße ist groß.</p>'
    out = translate_document(document, "xml", translate)
    assert seen == ["Die Straße ist groß."] and out == document.replace(seen[0], seen[0].upper())


@pytest.mark.parametrize("format,document", [("xml", '<?xml version="1.0"?><p>Ein Hund.</p>'),
                                             ("html", "<p>Ein Hund.</p>"), ("html", "Ein Hund.")])
def test_a_byte_order_mark_is_read_past_and_written_back(format, document):
    translate, seen = recording()
    assert translate_document("\ufeff" + document, format, translate) == "\ufeff" + document.replace("Ein Hund.",
                                                                                                      "EIN HUND.")
    assert seen == ["Ein Hund."]


@pytest.mark.parametrize("tail", ["<!--", "<![CDATA[", "<a b='", "<!x"])
def test_a_megabyte_of_unterminated_markup_is_read_in_one_pass(tail):
    document = "<p>Ein Hund.</p>" + tail * (1_000_000 // len(tail))
    start = time.monotonic()
    translate, seen = recording()
    assert translate_document(document, "html", translate) == "<p>EIN HUND.</p>" + document[16:]
    assert seen == ["Ein Hund."] and time.monotonic() - start < 30  # quadratic reading took many minutes


def test_a_document_longer_than_the_limit_is_refused_before_it_is_read():
    translate, seen = recording()
    for format in FORMATS:
        with pytest.raises(MarkupError, match=f"at most {MAX_DOCUMENT_CHARS:,} are read"):
            translate_document("<a/>" * (MAX_DOCUMENT_CHARS // 4 + 1), format, translate)
    assert seen == []
    translate_document("<a/>" * (MAX_DOCUMENT_CHARS // 8), "xml", translate)  # within the limit: read


def test_documents_in_the_servers_obey_the_sentence_limit_of_plain_text(service):
    paragraphs = "<p>Ein Hund läuft.</p>" * 600  # 600 sentences: far more than the 64 a request may hold
    for fields in ({"tag_handling": "xml"}, {"tag_handling": "html"}, {}):
        text = paragraphs if fields else " ".join(["Ein Hund läuft."] * 600)
        answer = service.post("/v2/translate", json={"text": [text], "target_lang": "EN-US", **fields})
        assert answer.status_code == 413 and "at most 64 per request" in answer.json()["message"], answer.text
    split = service.post("/v2/translate", json={"text": ["<p>Ein Hund läuft.</p>" * 40] * 2, "target_lang": "EN-US",
                                                "tag_handling": "html"})  # 80 sentences in two documents
    assert split.status_code == 413
    answer = service.post("/libretranslate/translate", json={"q": paragraphs, "source": "de", "target": "en",
                                                             "format": "html"})
    assert answer.status_code == 400 and "at most 64 per request" in answer.json()["error"]
    normal = service.post("/v2/translate", json={"text": ["<p>Ein Hund läuft.</p>"], "target_lang": "EN-US",
                                                 "tag_handling": "html"})
    assert normal.status_code == 200 and normal.json()["translations"][0]["text"].startswith("<p>")


def test_every_api_s_answer_warns_of_a_truncated_sentence_in_plain_text_and_documents(service):
    long = "Ein Hund " * 300 + "läuft"  # one sentence of far more than max_source_tokens subwords
    answers = {
        "native": service.post("/translate", json={"src": ["Ein Hund läuft.", long]}),
        "deepl": service.post("/v2/translate", json={"text": ["Ein Hund läuft.", long], "target_lang": "EN-US"}),
        "deepl html": service.post("/v2/translate", json={"text": [f"<p>Ein Hund läuft.</p><p>{long}</p>"],
                                                          "target_lang": "EN-US", "tag_handling": "html"}),
        "libre": service.post("/libretranslate/translate", json={"q": long, "source": "de", "target": "en"}),
        "libre html": service.post("/libretranslate/translate", json={"q": f"<p>{long}</p>", "source": "de",
                                                                      "target": "en", "format": "html"})}
    where = {"native": "text 2", "deepl": "text 2", "deepl html": "text 1 sentence 2", "libre": "text 1",
             "libre html": "text 1 sentence 1"}
    for name, answer in answers.items():
        assert answer.status_code == 200, answer.text
        [warning] = answer.json()["warnings"]
        assert warning.startswith(f"{where[name]}: ") and warning.endswith("subwords, truncated to 250"), name
    short = service.post("/v2/translate", json={"text": ["Ein Hund läuft."], "target_lang": "EN-US"})
    assert short.status_code == 200 and "warnings" not in short.json()


def test_a_truncation_in_a_shared_batch_is_told_to_the_request_that_sent_the_text():
    from types import SimpleNamespace

    from nmt.serve.batcher import _warn_each

    heard: dict[str, list] = {"a": [], "b": [], "c": []}
    jobs = [SimpleNamespace(texts=SimpleNamespace(pieces=[None] * count),
                            warn=lambda i, n, k=k: heard[k].append((i, n)))
            for k, count in (("a", 1), ("b", 2), ("c", 1))]
    jobs[2].warn = None  # a job that asked for no notes
    warn = _warn_each(jobs)
    for text, length in ((0, 300), (2, 400), (3, 500)):
        warn(text, length)
    assert heard == {"a": [(0, 300)], "b": [(1, 400)], "c": []}


def test_markup_faults_get_the_same_answer_from_every_api_and_the_server_stays_healthy(service, translator):
    def deepl(document: str, handling: str = "html") -> httpx.Response:
        return service.post("/v2/translate", json={"text": [document], "target_lang": "EN-US",
                                                   "tag_handling": handling})

    def libre(document: str) -> httpx.Response:
        return service.post("/libretranslate/translate", json={"q": document, "source": "de", "target": "en",
                                                               "format": "html"})

    plain = translator.translate("Ein Hund läuft.")
    for tail in UNTERMINATED.values():  # kept as written, the text before it translated
        assert deepl("<p>Ein Hund läuft.</p>" + tail).json()["translations"][0]["text"] == f"<p>{plain}</p>{tail}"
        assert libre("<p>Ein Hund läuft.</p>" + tail).json()["translatedText"] == f"<p>{plain}</p>{tail}"
        assert deepl("<p>Ein Hund läuft.</p>" + tail, "xml").status_code == 400
    bogus = "<p>Ein Hund <![ läuft.</p>"
    for answer in (deepl(bogus), libre(bogus)):
        assert answer.status_code == 400 and "HTML that cannot be read at line 1" in answer.text, answer.text
    declared = '<?xml version="1.0" encoding="{}"?><p>Die Straße ist groß.</p>'
    expected = declared.format("{}").replace("Die Straße ist groß.", translator.translate("Die Straße ist groß."))
    for encoding in ("ISO-8859-1", "UTF-16"):
        answer = deepl(declared.format(encoding), "xml")
        assert answer.status_code == 200 and answer.json()["translations"][0]["text"] == expected.format(encoding)
    assert service.get("/health").status_code == 200 and deepl("<p>Ein Hund läuft.</p>").status_code == 200


def test_nmt_translate_reads_documents_as_the_servers_do_and_fails_in_one_line(trained_run, tmp_path, capsys):
    from nmt.cli import translate_main
    from tests.conftest import fails_cleanly

    def run(name: str, content: bytes, format: str = "html") -> list[str]:
        (tmp_path / name).write_bytes(content)
        return ["-c", str(trained_run), "-i", str(tmp_path / name), "--format", format, "-o", str(tmp_path / "out")]

    words = " ".join(["Hund"] * 600)  # one sentence far longer than the model reads
    assert translate_main(run("long.html", f"<p>{words}</p>".encode())) == 0
    assert re.search(r"warning: \S+long.html sentence 1: \d+ subwords, truncated to \d+", capsys.readouterr().err)
    bom = '\ufeff<?xml version="1.0" encoding="UTF-8"?><p>Ein Hund läuft.</p>'.encode()
    assert translate_main(run("bom.xml", bom, "xml")) == 0
    assert (tmp_path / "out").read_bytes().startswith('\ufeff<?xml version="1.0" encoding="UTF-8"?><p>'.encode())
    (tmp_path / "out").unlink()
    latin = '<?xml version="1.0" encoding="ISO-8859-1"?><p>Die Straße.</p>'
    fails_cleanly(translate_main, run("latin.xml", latin.encode(), "xml"), capsys, tmp_path,
                  "the XML declaration names the encoding 'ISO-8859-1'")
    fails_cleanly(translate_main, run("bogus.html", "<p>Ein Hund <![ läuft.</p>".encode()), capsys, tmp_path,
                  "bogus.html: HTML that cannot be read at line 1, column 16")
    fails_cleanly(translate_main, run("huge.xml", b"<a/>" * (MAX_DOCUMENT_CHARS // 4 + 1), "xml"), capsys, tmp_path,
                  f"at most {MAX_DOCUMENT_CHARS:,}")
