"""nmt-serve for existing clients: the LibreTranslate and DeepL client libraries (libretranslatepy posts a form,
deep-translator's LibreTranslator a query string, deepl JSON with its own header) against a real `nmt-serve
--api-keys` on the loopback get exactly nmt-translate's translations; keys, /metrics, the access log, the rate
limit and each API's errors."""

from __future__ import annotations

import contextlib
import html
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable

import httpx
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from nmt.loader import load_translator
from nmt.serve.auth import MAX_BUCKETS, WRONG_KEYS_PER_MINUTE, Access, KeyRing, RateLimit
from nmt.serve.command import main as serve_main
from nmt.serve.limits import Limits
from nmt.serve.service import create_service
from tests.test_serve import REPO, TestClient, _nmt_translate, client_from, free_port, wait_healthy

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SENTENCES = ["Ein Mädchen & ihr Hund laufen über die Wiese.", "Zwei Männer spielen 100% Fußball + Tennis.",
             "Eine alte Frau sitzt auf einer Bank."]
KEY, OTHER_KEY, NEW_KEY = "k" * 8 + "-first-key-0123", "second-key-" + "x" * 12, "the-new-key-after-sighup"
WRONG_KEY = "wrong-key-but-long-enough-9"
DOC_SENTENCE = "Zwei Hunde spielen im Schnee."  # the examples' sentence in docs/serve.md


@pytest.fixture(scope="module")
def expected(trained_run, tmp_path_factory) -> list[str]:
    return _nmt_translate(trained_run, tmp_path_factory.mktemp("expected"), SENTENCES)


@pytest.fixture(scope="module")
def server(trained_run, tmp_path_factory):
    """`nmt-serve --api-keys` on a free loopback port: (url, process, key file, log file)."""
    folder = tmp_path_factory.mktemp("compat")
    keys, log = folder / "keys.txt", folder / "server.log"
    keys.write_text(f"# API keys\n{KEY}\n\n{OTHER_KEY}\n", encoding="ascii")
    port = free_port()
    with open(log, "w", encoding="utf-8") as err:
        process = subprocess.Popen([sys.executable, "-m", "nmt.serve.command", "-c", str(trained_run), "--port",
                                    str(port), "--api-keys", str(keys)], stderr=err, cwd=REPO,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url, process, keys, log
    finally:
        process.terminate()
        process.wait(30)


def _metrics(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, parsed by prometheus_client: (name, sorted labels) -> value."""
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _moved(before: dict, after: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_libretranslatepy_posts_a_form_and_gets_nmt_translate_output(server, expected):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(f"{server[0]}/libretranslate/", api_key=KEY)
    assert [client.translate(sentence, "de", "en") for sentence in SENTENCES] == expected
    assert client.languages() == [{"code": "de", "name": "German", "targets": ["en"]},
                                  {"code": "en", "name": "English", "targets": []}]
    assert client.detect(SENTENCES[0]) == [{"confidence": 0.0, "language": "de"}]


def test_deep_translator_sends_a_query_string_and_gets_nmt_translate_output(server, expected):
    from deep_translator import LibreTranslator

    client = LibreTranslator(source="de", target="en", api_key=OTHER_KEY, custom_url=f"{server[0]}/libretranslate/")
    assert client.translate_batch(SENTENCES) == expected


def test_the_deepl_client_gets_nmt_translate_output(server, expected):
    import deepl

    client = deepl.Translator(KEY, server_url=server[0])
    before = client.get_usage().character.count
    results = client.translate_text(SENTENCES, source_lang="DE", target_lang="EN-US")
    assert [result.text for result in results] == expected
    assert [result.billed_characters for result in results] == [len(sentence) for sentence in SENTENCES]
    assert {result.detected_source_lang for result in results} == {"DE"}
    assert client.translate_text(SENTENCES[1], target_lang="en-gb").text == expected[1]  # source left to "detect"
    assert client.get_usage().character.count - before == sum(map(len, SENTENCES)) + len(SENTENCES[1])
    assert [lang.code for lang in client.get_source_languages()] == ["DE"]
    assert [lang.code for lang in client.get_target_languages()] == ["EN-GB", "EN-US"]


PARAGRAPH_SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Kinder spielen im Park.", "Eine Frau trinkt Kaffee."]
PARAGRAPH = "Ein Mann fährt Fahrrad.  Zwei Kinder spielen im Park.\nEine Frau trinkt Kaffee."


def test_the_deepl_client_s_split_sentences_is_honoured_and_it_reads_answers_with_a_confidence(server, trained_run,
                                                                                                tmp_path):
    import deepl

    client = deepl.Translator(KEY, server_url=server[0])
    one, two, three = _nmt_translate(trained_run, tmp_path, PARAGRAPH_SENTENCES)
    whole = _nmt_translate(trained_run, tmp_path, [PARAGRAPH.replace("\n", " ")], "--split-sentences", "off")[0]
    assert client.translate_text(PARAGRAPH, target_lang="EN-US").text == f"{one}  {two}\n{three}"
    assert client.translate_text(PARAGRAPH, target_lang="EN-US", split_sentences="1").text == f"{one}  {two}\n{three}"
    assert client.translate_text(PARAGRAPH, target_lang="EN-US", split_sentences="0").text == whole
    broken = "Ein Mann\nfährt Fahrrad. Zwei Kinder spielen im Park."  # a line break inside the first sentence
    nonewlines = client.translate_text(broken, target_lang="EN-US", split_sentences=deepl.SplitSentences.NO_NEWLINES)
    assert nonewlines.text == f"{_nmt_translate(trained_run, tmp_path, ['Ein Mann fährt Fahrrad.'])[0]} {two}"
    auth = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    raw = httpx.post(f"{server[0]}/v2/translate", json={"text": [PARAGRAPH, ""], "target_lang": "EN-US"},
                     headers=auth).json()["translations"]
    native = httpx.post(f"{server[0]}/translate", json={"src": [PARAGRAPH]}, headers={"Authorization": f"Bearer {KEY}"})
    assert 0.0 < raw[0]["confidence"] <= 1.0 and raw[0]["confidence"] == native.json()["confidences"][0]
    assert raw[1] == {"detected_source_language": "DE", "text": "", "billed_characters": 0, "confidence": None}
    bad = httpx.post(f"{server[0]}/v2/translate", json={"text": ["a"], "target_lang": "EN-US", "split_sentences": "2"},
                     headers=auth)
    assert bad.status_code == 400 and "'split_sentences' not supported" in bad.json()["message"]


def test_libretranslate_clients_get_paragraphs_split_and_read_answers_with_a_confidence(server, trained_run, tmp_path):
    from deep_translator import LibreTranslator
    from libretranslatepy import LibreTranslateAPI

    one, two, three = _nmt_translate(trained_run, tmp_path, PARAGRAPH_SENTENCES)
    joined = f"{one}  {two}\n{three}"
    assert LibreTranslateAPI(f"{server[0]}/libretranslate/", api_key=KEY).translate(PARAGRAPH, "de", "en") == joined
    lt = LibreTranslator(source="de", target="en", api_key=KEY, custom_url=f"{server[0]}/libretranslate/")
    assert lt.translate(PARAGRAPH) == joined
    answer = httpx.post(f"{server[0]}/libretranslate/translate",
                        json={"q": [PARAGRAPH, " "], "source": "de", "target": "en", "api_key": KEY}).json()
    assert answer["translatedText"] == [joined, ""]
    assert 0.0 < answer["confidence"][0] <= 1.0 and answer["confidence"][1] is None


def test_the_deepl_client_with_tag_handling_gets_its_markup_back_around_nmt_translate_output(server, expected):
    import deepl

    client = deepl.Translator(KEY, server_url=server[0])
    documents = [f"<p>{html.escape(s, quote=False)}</p>" for s in SENTENCES]
    results = client.translate_text(documents, target_lang="EN-US", tag_handling="html")
    assert [result.text for result in results] == [f"<p>{html.escape(e, quote=False)}</p>" for e in expected]
    xml = "<doc><t>Ein <b>Hund</b> läuft.</t><code>Ein Hund</code><keep a='1'>Ein Hund</keep></doc>"
    out = client.translate_text(xml, target_lang="EN-GB", tag_handling="xml", ignore_tags=["keep"]).text
    assert out.endswith("</t><code>Ein Hund</code><keep a='1'>Ein Hund</keep></doc>")
    assert [e.tag for e in ElementTree.fromstring(out).iter()] == ["doc", "t", "b", "code", "keep"]
    with pytest.raises(deepl.DeepLException, match="not well-formed XML"):
        client.translate_text("<p>Ein Hund", target_lang="EN-US", tag_handling="xml")


def test_marked_up_answers_carry_the_confidence_of_the_text_they_translated(server):
    import deepl

    auth = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    plain = httpx.post(f"{server[0]}/v2/translate", json={"text": SENTENCES[:2], "target_lang": "EN-US"},
                       headers=auth).json()["translations"]
    documents = [f"<p>{html.escape(SENTENCES[0], quote=False)}</p>", "<p><code>x = 1</code></p>"]
    tagged = httpx.post(f"{server[0]}/v2/translate", json={"text": documents, "target_lang": "EN-US",
                                                          "tag_handling": "html"}, headers=auth).json()["translations"]
    assert tagged[0]["confidence"] == plain[0]["confidence"] and tagged[1]["confidence"] is None
    client = deepl.Translator(KEY, server_url=server[0])  # the official client still reads the answer
    assert client.translate_text(documents[0], target_lang="EN-US", tag_handling="html").text == tagged[0]["text"]
    both = "".join(f"<li>{html.escape(sentence, quote=False)}</li>" for sentence in SENTENCES[:2])
    answer = httpx.post(f"{server[0]}/libretranslate/translate",
                        json={"q": [both, documents[1]], "source": "de", "target": "en", "format": "html",
                              "api_key": KEY}).json()
    low, high = sorted(item["confidence"] for item in plain)
    assert low - 1e-4 <= answer["confidence"][0] <= high + 1e-4  # a mean of the two sentences' (rounded)
    assert answer["confidence"][1] is None and set(answer) == {"translatedText", "confidence"}


def test_libretranslate_format_html_keeps_the_markup_and_translates_the_text(server, expected):
    document = f"<ul><li class=\"a\">{html.escape(SENTENCES[0], quote=False)}</li>\n<li>{SENTENCES[2]}</li></ul>"
    answer = httpx.post(f"{server[0]}/libretranslate/translate",
                        data={"q": document, "source": "de", "target": "en", "format": "html", "api_key": KEY})
    assert answer.status_code == 200, answer.text
    assert answer.json()["translatedText"] == (f"<ul><li class=\"a\">{html.escape(expected[0], quote=False)}</li>\n"
                                               f"<li>{html.escape(expected[2], quote=False)}</li></ul>")
    assert set(answer.json()) == {"translatedText", "confidence"}


def test_the_client_examples_of_docs_serve_md_print_nmt_translate_output(server, trained_run, tmp_path):
    text = (REPO / "docs" / "serve.md").read_text(encoding="utf-8")
    examples = re.findall(r"```python\n(.*?)```", text[text.index("## Existing clients"):], re.S)
    assert len(examples) == 3 and all(DOC_SENTENCE in code and "YOUR-KEY" in code for code in examples)
    translation = _nmt_translate(trained_run, tmp_path, [DOC_SENTENCE])[0]
    for code in examples:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code.replace("http://127.0.0.1:8000", server[0]).replace("YOUR-KEY", KEY), {})
        assert printed.getvalue() == translation + "\n", code


def test_a_wrong_or_missing_key_is_403_for_every_client_and_the_right_key_works(server):
    import deepl
    from deep_translator import LibreTranslator
    from deep_translator.exceptions import AuthorizationException
    from libretranslatepy import LibreTranslateAPI

    url = server[0]
    for key in (WRONG_KEY, None):
        with pytest.raises(urllib.error.HTTPError) as refused:
            LibreTranslateAPI(f"{url}/libretranslate/", api_key=key).translate(SENTENCES[0], "de", "en")
        assert refused.value.code == 403 and "error" in refused.value.read().decode()
    with pytest.raises(AuthorizationException):  # deep-translator itself refuses to send no key
        LibreTranslator(source="de", target="en", api_key=WRONG_KEY, custom_url=f"{url}/libretranslate/").translate(
            SENTENCES[0])
    with pytest.raises(deepl.AuthorizationException):  # and the deepl client an empty one
        deepl.Translator(WRONG_KEY, server_url=url).translate_text(SENTENCES[0], target_lang="EN-US")
    assert httpx.post(f"{url}/v2/translate", json={"text": ["a"], "target_lang": "EN-US"}).status_code == 403
    for path, body in (("/translate", {"src": ["a"]}), ("/attention", {"src": "a"})):
        assert httpx.post(f"{url}{path}", json=body).status_code == 403
        wrong = httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {WRONG_KEY}"})
        assert wrong.status_code == 403 and set(wrong.json()) == {"error"}
        assert httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    for path in ("/", "/metrics", "/libretranslate/languages", "/libretranslate/frontend/settings", "/v2/usage"):
        assert httpx.get(f"{url}{path}").status_code == 403, path
        assert httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {OTHER_KEY}"}).status_code == 200, path
    assert httpx.get(f"{url}/health").status_code == 200


def test_metrics_parse_and_count_exactly_the_requests_sent(server):
    url, auth = server[0], {"Authorization": f"DeepL-Auth-Key {KEY}"}
    before = _metrics(url)
    for sentence in SENTENCES:
        assert httpx.post(f"{url}/libretranslate/translate", data={"q": sentence, "source": "de", "target": "en",
                                                                   "api_key": KEY}).status_code == 200
    assert httpx.post(f"{url}/v2/translate", json={"text": SENTENCES, "target_lang": "EN-US"},
                      headers=auth).status_code == 200
    assert httpx.post(f"{url}/v2/translate", json={"text": SENTENCES, "target_lang": "FR"}, headers=auth).status_code \
        == 400
    assert httpx.post(f"{url}/libretranslate/translate", data={"q": "a", "source": "de", "target": "en"}).status_code \
        == 403
    after = _metrics(url)
    lt, dl, chars = "/libretranslate/translate", "/v2/translate", sum(map(len, SENTENCES))
    assert _moved(before, after, "nmt_serve_requests_total", endpoint=lt, status="200") == 3
    assert _moved(before, after, "nmt_serve_requests_total", endpoint=lt, status="403") == 1
    assert _moved(before, after, "nmt_serve_requests_total", endpoint=dl, status="200") == 1
    assert _moved(before, after, "nmt_serve_requests_total", endpoint=dl, status="400") == 1
    assert _moved(before, after, "nmt_serve_sentences_total", endpoint=lt) == 3
    assert _moved(before, after, "nmt_serve_sentences_total", endpoint=dl) == 3  # the refused request adds none
    assert _moved(before, after, "nmt_serve_characters_total", endpoint=lt) == chars
    assert _moved(before, after, "nmt_serve_characters_total", endpoint=dl) == chars
    assert _moved(before, after, "nmt_serve_request_duration_seconds_count", endpoint=lt) == 4
    assert _moved(before, after, "nmt_serve_batch_sentences_count") == 4  # one request at a time: one search each
    assert _moved(before, after, "nmt_serve_batch_sentences_sum") == 6
    assert after[("nmt_serve_queue_depth", ())] == 0
    assert _moved(before, after, "nmt_serve_requests_total", endpoint="/metrics", status="200") == 1  # `before`


def _usage_status(url: str, key: str) -> int:
    return httpx.get(f"{url}/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {key}"}).status_code


def _after_sighup(server, change: Callable[[], object], expected: str) -> str:
    """The server's first new line about the key file that holds `expected`, once `change()` is made and SIGHUP
    sent; the server must stay up."""
    process, log = server[1], server[3]

    def said() -> list[str]:
        return [line for line in log.read_text(encoding="utf-8").splitlines() if "SIGHUP:" in line]

    seen = len(said())
    change()
    process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, f"nmt-serve ended on SIGHUP: {log.read_text(encoding='utf-8')[-300:]}"
        found = [line for line in said()[seen:] if expected in line]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"nmt-serve said nothing with {expected!r} on SIGHUP")


def test_sighup_rereads_the_key_file(server):
    url, process, keys, _log = server
    original = keys.read_text(encoding="ascii")

    def write(content: str) -> Callable[[], int]:
        return lambda: keys.write_text(content, encoding="ascii")

    try:
        assert "1 API keys read" in _after_sighup(server, write(f"{NEW_KEY}\n"), "SIGHUP:")
        assert (_usage_status(url, NEW_KEY), _usage_status(url, KEY)) == (200, 403)
        assert "keys in use stay" in _after_sighup(server, write("short\n"), "SIGHUP:")  # a bad file keeps them
        assert _usage_status(url, NEW_KEY) == 200
    finally:
        _after_sighup(server, write(original), "2 API keys read")
    assert _usage_status(url, KEY) == 200 and process.poll() is None


def test_sighup_keeps_the_keys_while_the_key_file_is_gone_or_cannot_be_read(server):
    """As when an editor or a config manager replaces the file (renamed away and back), or an operator points it
    somewhere unreadable: each reload says why in one line, and the keys in use stay."""
    url, process, keys, _log = server
    original, away = keys.read_text(encoding="ascii"), keys.with_name("keys.moved")
    stays = "the 2 keys in use stay"
    try:
        assert "no such file; " + stays in _after_sighup(server, lambda: keys.rename(away), stays)
        assert "(File name too long); " + stays in _after_sighup(server, lambda: keys.symlink_to("x" * 300), stays)
        keys.unlink()
        assert "is a folder" in _after_sighup(server, keys.mkdir, stays)
        keys.rmdir()
        assert _usage_status(url, KEY) == 200
        for _ in range(10):  # replaced under a burst of reloads
            away.rename(keys)
            process.send_signal(signal.SIGHUP)
            keys.rename(away)
            process.send_signal(signal.SIGHUP)
        assert "3 API keys read" in _after_sighup(
            server, lambda: keys.write_text(f"{original}{NEW_KEY}\n", encoding="ascii"), "3 API keys read")
        assert (_usage_status(url, KEY), _usage_status(url, NEW_KEY)) == (200, 200)
    finally:
        for leftover in (keys, away):
            if leftover.is_symlink() or leftover.is_file():
                leftover.unlink()
            elif leftover.is_dir():
                leftover.rmdir()
        _after_sighup(server, lambda: keys.write_text(original, encoding="ascii"), "2 API keys read")
    assert process.poll() is None


def test_wrong_keys_from_one_address_are_slowed_and_no_other_address_is(server):
    url = server[0]
    with client_from("127.0.0.10") as guesser:
        guesses = [guesser.get(f"{url}/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {WRONG_KEY}{i}"})
                   for i in range(WRONG_KEYS_PER_MINUTE + 2)]
        assert [guess.status_code for guess in guesses] == [403] * WRONG_KEYS_PER_MINUTE + [429] * 2
        assert 1 <= int(guesses[-1].headers["retry-after"]) <= 60 // WRONG_KEYS_PER_MINUTE
        assert "too many wrong API keys" in guesses[-1].json()["message"]
        assert _usage_status(url, KEY) == 200  # another address (127.0.0.1) with the right key: not slowed
        right = guesser.get(f"{url}/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {KEY}"})
        assert right.status_code == 429  # a guesser cannot tell a right key by its answer
        lt = guesser.post(f"{url}/libretranslate/translate", data={"q": "a", "source": "de", "target": "en",
                                                                   "api_key": WRONG_KEY})
        assert lt.status_code == 429 and set(lt.json()) == {"error"} and int(lt.headers["retry-after"]) >= 1
    with client_from("127.0.0.11") as forgetful:  # no key at all is no guess
        assert [forgetful.get(f"{url}/v2/usage").status_code for _ in range(WRONG_KEYS_PER_MINUTE + 2)] == \
            [403] * (WRONG_KEYS_PER_MINUTE + 2)


def test_rate_buckets_stay_bounded_and_keep_the_callers_seen_last():
    """9,000 callers in a row leave MAX_BUCKETS buckets; a throttled caller who keeps calling keeps its bucket
    (so it stays throttled), while those seen longest ago are forgotten first."""
    clock = [0.0]
    limit = RateLimit(1, clock=lambda: clock[0])
    assert limit.wait("busy") == 0 and limit.wait("busy") == 60
    for caller in range(9000):
        assert limit.wait(caller) == 0
        if caller % 1000 == 0:
            assert limit.wait("busy") == 60
    assert len(limit.buckets) == MAX_BUCKETS
    assert limit.wait(8999) == 60 and limit.wait(0) == 0  # 0 was forgotten: a full bucket again


def test_the_access_log_has_each_request_and_never_a_key_or_a_text(server):
    url, log = server[0], server[3]
    httpx.post(f"{url}/libretranslate/translate", params={"q": SENTENCES[0], "source": "de", "target": "en",
                                                          "api_key": WRONG_KEY})
    lines = log.read_text(encoding="utf-8").splitlines()
    assert any(" POST /libretranslate/translate 200 " in line and line.endswith(" 1 sentences") for line in lines)
    assert any(" POST /v2/translate 200 " in line and line.endswith(" 3 sentences") for line in lines)
    assert any(" POST /libretranslate/translate 403 " in line for line in lines)
    text = "\n".join(lines)
    for secret in (KEY, OTHER_KEY, NEW_KEY, WRONG_KEY, "Mädchen", "M%C3%A4dchen", "Traceback"):
        assert secret not in text, secret


@pytest.fixture(scope="module")
def local(trained_run, tmp_path_factory):
    """The whole service in-process with two keys and 3 requests a minute on a clock the test turns."""
    clock = [0.0]
    folder = tmp_path_factory.mktemp("local")
    (folder / "keys").write_text(f"{KEY}\n{OTHER_KEY}\n", encoding="ascii")
    access = Access(KeyRing(folder / "keys"), RateLimit(3, clock=lambda: clock[0]))
    app = create_service(load_translator([trained_run], torch.device("cpu")), Limits(max_sentences=8, max_chars=400,
                                                                                     max_beam=4), access=access)
    with TestClient(app) as client:
        yield client, clock


def _lt(client, clock, **fields):
    clock[0] += 60.0  # a fresh minute: the rate limit stays out of the way
    return client.post("/libretranslate/translate", **fields)


def test_libretranslate_alternatives_are_nmt_translates_n_best(local, trained_run, tmp_path):
    client, clock = local
    answer = _lt(client, clock, json={"q": SENTENCES[:2], "source": "auto", "target": "en", "alternatives": 2,
                                      "api_key": KEY}).json()
    rows = _nmt_translate(trained_run, tmp_path, SENTENCES[:2], "--beam", "3", "--n-best", "3")
    n_best = [[row.split(" ||| ")[1] for row in rows if row.startswith(f"{i} ||| ")] for i in range(2)]
    assert answer["translatedText"] == [hyps[0] for hyps in n_best]
    assert answer["alternatives"] == [[h for i, h in enumerate(hyps[1:]) if h not in hyps[:i + 1] and h]
                                      for hyps in n_best]
    assert answer["detectedLanguage"] == [{"confidence": 0.0, "language": "de"}] * 2


def test_libretranslate_keeps_a_texts_lines(local, expected):
    client, clock = local
    answer = _lt(client, clock, data={"q": "\r\n".join(SENTENCES), "source": "de", "target": "en", "api_key": KEY})
    assert set(answer.json()) == {"translatedText", "confidence"}
    assert answer.json()["translatedText"] == "\r\n".join(expected)
    assert 0.0 < answer.json()["confidence"] <= 1.0


@pytest.mark.parametrize("fields,status,words", [
    ({"json": {"source": "de", "target": "en"}}, 400, "missing q"),
    ({"json": {"q": ["a", 3], "source": "de", "target": "en"}}, 400, "list of strings"),
    ({"json": {"q": "a", "source": "fr", "target": "en"}}, 400, "'fr' is not supported"),
    ({"json": {"q": "a", "source": "de", "target": "de"}}, 400, "'de' is not supported"),
    ({"json": {"q": "a", "target": "en"}}, 400, "missing source"),
    ({"json": {"q": "a", "source": "de", "target": "en", "format": "pdf"}}, 400, "'pdf' format is not supported"),
    ({"json": {"q": "a", "source": "de", "target": "en", "format": "html", "alternatives": 1}}, 400,
     "not available with format=html"),
    ({"json": {"q": "a", "source": "de", "target": "en", "alternatives": "x"}}, 400, "not a number"),
    ({"json": {"q": "a", "source": "de", "target": "en", "alternatives": 4}}, 400, "must be <= 3"),
    ({"data": {"q": "a" * 401, "source": "de", "target": "en"}}, 400, "at most 400"),
    ({"data": {"q": "\n".join("a" * 9), "source": "de", "target": "en"}}, 400, "at most 8"),
    ({"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, "not valid JSON"),
    ({"content": b"[1]", "headers": {"Content-Type": "application/json"}}, 400, "JSON object"),
    ({"content": b"q=%ff&source=de&target=en", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
     400, "not UTF-8"),
    ({"content": b"q: a", "headers": {"Content-Type": "text/plain"}}, 400, "cannot be read"),
    ({"content": b"x" * 100_000, "headers": {"Content-Type": "application/x-www-form-urlencoded"}}, 400, "exceeds"),
    ({"json": {"q": "a", "source": "de", "target": "en", "api_key": WRONG_KEY}}, 403, "invalid API key"),
    ({"data": {"q": "a", "source": "de", "target": "en"}}, 403, "needs an API key"),
    ({"json": {"q": "a", "source": "de", "target": "en", "api_key": ""}}, 403, "needs an API key"),
])
def test_libretranslate_malformed_requests_get_its_error_shape_and_the_server_stays_healthy(local, fields, status,
                                                                                           words):
    client, clock = local
    if status != 403 and "json" in fields:
        fields = {"json": {**fields["json"], "api_key": KEY}}
    elif status != 403:
        fields = {**fields, "headers": {**fields.get("headers", {}), "Authorization": f"Bearer {KEY}"}}
    answer = _lt(client, clock, **fields)
    assert answer.status_code == status and set(answer.json()) == {"error"}, answer.text
    assert words in answer.json()["error"]
    assert client.get("/health").status_code == 200


@pytest.mark.parametrize("body,status,words", [
    ({"target_lang": "EN-US"}, 400, "'text' not specified"),
    ({"text": "a", "target_lang": "EN-US"}, 400, "array of strings"),
    ({"text": ["a", None], "target_lang": "EN-US"}, 400, "strings only"),
    ({"text": ["a"]}, 400, "'target_lang' not specified"),
    ({"text": ["a"], "target_lang": "DE"}, 400, "'target_lang' not supported"),
    ({"text": ["a"], "target_lang": "EN-US", "source_lang": "FR"}, 400, "'source_lang' not supported"),
    ({"text": ["a"], "target_lang": "EN-US", "tag_handling": "pdf"}, 400, "'tag_handling' not supported"),
    ({"text": ["<p>a</b>"], "target_lang": "EN-US", "tag_handling": "xml"}, 400, "not well-formed XML at line 1"),
    ({"text": ["a", "<a/><b>"], "target_lang": "EN-US", "tag_handling": "xml"}, 400, "text 1: not well-formed XML"),
    ({"text": ["a"], "target_lang": "EN-US", "ignore_tags": "x"}, 400, "needs 'tag_handling'"),
    ({"text": ["a"], "target_lang": "EN-US", "tag_handling": "xml", "ignore_tags": [1]}, 400, "'ignore_tags' must"),
    ({"text": ["a"], "target_lang": "EN-US", "tag_handling": "xml", "splitting_tags": "p"}, 400,
     "'splitting_tags' is not supported"),
    ({"text": ["a"], "target_lang": "EN-US", "formality": "more"}, 400, "formality"),
    ({"text": ["a"] * 9, "target_lang": "EN-US"}, 413, "at most 8"),
    ({"text": ["x" * 50_000], "target_lang": "EN-US"}, 413, "exceeds"),
])
def test_deepl_malformed_requests_get_its_error_shape_and_the_server_stays_healthy(local, body, status, words):
    client, clock = local
    clock[0] += 60.0
    answer = client.post("/v2/translate", json=body, headers={"Authorization": f"DeepL-Auth-Key {KEY}"})
    assert answer.status_code == status and set(answer.json()) == {"message"}, answer.text
    assert words in answer.json()["message"]
    assert client.get("/health").status_code == 200


def test_the_rate_limit_answers_429_per_key_in_each_apis_shape(local):
    client, clock = local
    clock[0] += 60.0
    deepl_auth, form = {"Authorization": f"DeepL-Auth-Key {KEY}"}, {"source": "de", "target": "en", "q": "a"}
    assert [client.get("/v2/usage", headers=deepl_auth).status_code for _ in range(3)] == [200] * 3
    refused = client.get("/v2/usage", headers=deepl_auth)
    assert refused.status_code == 429 and "too many requests" in refused.json()["message"]
    assert int(refused.headers["retry-after"]) == 20  # a token every 20 s at 3 a minute
    lt = client.post("/libretranslate/translate", data={**form, "api_key": KEY})
    assert lt.status_code == 429 and set(lt.json()) == {"error"} and int(lt.headers["retry-after"]) == 20
    assert client.post("/libretranslate/translate", data={**form, "api_key": OTHER_KEY}).status_code == 200
    bearer = {"Authorization": f"Bearer {OTHER_KEY}"}  # an empty api_key, as JS clients send, leaves the header
    assert client.post("/libretranslate/translate", json={**form, "api_key": ""}, headers=bearer).status_code == 200
    assert client.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200  # not limited
    clock[0] += 20.0
    assert client.get("/v2/usage", headers=deepl_auth).status_code == 200


def test_key_files_that_cannot_serve_are_one_line_errors_that_show_no_key(tmp_path, capsys):
    cases = {"missing": None, "empty": "# no key yet\n\n", "short": "abc123\n",
             "spaced": "a key with spaces in it\n", "latin1": "schlüssel-der-lang-genug-ist\n"}
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_text(content, encoding="latin-1")
        assert serve_main(["-c", str(tmp_path / "no-model"), "--api-keys", str(path)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err, err
        assert content is None or content.strip().splitlines()[-1] not in err


def test_a_key_ring_knows_its_keys_only(tmp_path):
    (tmp_path / "keys").write_text(f"  {KEY}  \n{OTHER_KEY}\n", encoding="ascii")
    ring = KeyRing(tmp_path / "keys")
    assert len(ring) == 2 and ring.identify(KEY) is not None and ring.identify(OTHER_KEY) != ring.identify(KEY)
    for other in (KEY[:-1], KEY + "x", KEY.upper(), "", "\ud800"):
        assert ring.identify(other) is None


def test_listening_beyond_the_loopback_needs_keys_or_the_insecure_flag(tmp_path, capsys):
    model = str(tmp_path / "no-model")
    assert serve_main(["-c", model, "--host", "0.0.0.0"]) == 2
    assert "--api-keys" in capsys.readouterr().err
    assert serve_main(["-c", model, "--host", "0.0.0.0", "--insecure-no-auth"]) == 1  # the model is missing
    assert "warning: listening on 0.0.0.0 without API keys" in capsys.readouterr().err
    assert serve_main(["-c", model, "--host", "::1", "--rate-limit", "10/hour"]) == 2
    assert "N/min" in capsys.readouterr().err


def test_the_serve_benchmark_sends_each_level_through_each_api(trained_run, tmp_path):
    from benchmarks.run_all import _serve_section
    from benchmarks.serve import main as bench_main

    assert bench_main([str(trained_run), "--clients", "1", "2", "--requests", "3", "--seconds", "30", "--apis",
                       "native", "libretranslate", "--out-dir", str(tmp_path)]) == 0
    record = json.loads(next(tmp_path.glob("serve_*.json")).read_text(encoding="utf-8"))
    assert [(level["api"], level["clients"], level["requests"]) for level in record["levels"]] == [
        ("native", 1, 3), ("libretranslate", 1, 3), ("native", 2, 3), ("libretranslate", 2, 3)]
    assert set(record["speedup"]) == {"native", "libretranslate"} and set(record["vs_native"]) == {"libretranslate"}
    table = [line for line in _serve_section({"serve.json": record}) if line.startswith(f"| {record['run']} |")]
    assert len(table) == 4 and "| libretranslate | 2 | 3 |" in table[3]


KEYED = [("POST", "/translate", {"json": {"src": ["Ein Hund."]}}), ("POST", "/attention", {"json": {"src": "Hund."}}),
         ("GET", "/metrics", {}), ("POST", "/v2/translate", {"json": {"text": ["Ein Hund."], "target_lang": "EN-US"}}),
         ("GET", "/v2/languages", {}), ("GET", "/v2/usage", {}), ("GET", "/v2/glossary-language-pairs", {}),
         ("GET", "/v2/glossaries", {}), ("GET", "/v2/glossaries/x", {}), ("GET", "/v2/glossaries/x/entries", {}),
         ("DELETE", "/v2/glossaries/x", {}),
         ("POST", "/v2/glossaries", {"json": {"name": "g", "source_lang": "de", "target_lang": "en",
                                              "entries": "Hund\tpuppy"}}),
         ("POST", "/libretranslate/translate", {"data": {"q": "Ein Hund.", "source": "de", "target": "en"}}),
         ("POST", "/libretranslate/detect", {"data": {"q": "Ein Hund."}}), ("GET", "/libretranslate/languages", {}),
         ("GET", "/libretranslate/frontend/settings", {})]


@pytest.mark.parametrize("method,path,body", KEYED)
def test_a_request_has_one_identity_on_every_keyed_endpoint(local, method, path, body):
    client, clock = local
    deepl = [("Authorization", f"DeepL-Auth-Key {key}") for key in (WRONG_KEY, OTHER_KEY)]
    for headers in (deepl, deepl[::-1], [deepl[1]] * 2, [("Authorization", f"Bearer {KEY}"), deepl[1]]):
        clock[0] += 60.0
        answer = client.request(method, path, headers=headers, **body)
        assert answer.status_code == 400 and "2 Authorization headers" in answer.text, (headers, answer.text)
    clock[0] += 60.0
    answer = client.request(method, path, headers=[deepl[1]], **body)
    assert answer.status_code in (200, 201, 404), answer.text  # one key: answered (404: no glossary x)
    if path == "/v2/glossaries" and method == "POST":
        assert client.delete(f"/v2/glossaries/{answer.json()['glossary_id']}", headers=[deepl[1]]).status_code == 204


def test_two_credentials_never_file_a_glossary_where_another_key_sees_it(local):
    client, clock = local
    clock[0] += 60.0
    body = {"name": "g", "source_lang": "de", "target_lang": "en", "entries": "Hund\tpuppy"}
    for key in (KEY, OTHER_KEY):  # B files with [wrong, B]; C lists with [wrong, C]
        two = [("Authorization", f"DeepL-Auth-Key {WRONG_KEY}"), ("Authorization", f"DeepL-Auth-Key {key}")]
        assert client.post("/v2/glossaries", json=body, headers=two).status_code == 400
        assert client.get("/v2/glossaries", headers=two).status_code == 400
    for key in (KEY, OTHER_KEY):
        clock[0] += 60.0
        own = client.get("/v2/glossaries", headers={"Authorization": f"DeepL-Auth-Key {key}"})
        assert own.status_code == 200 and own.json() == {"glossaries": []}


def test_libretranslates_api_key_field_and_header_must_name_one_key(local):
    client, clock = local
    form = {"q": "Ein Hund.", "source": "de", "target": "en"}
    refused = [({"api_key": KEY}, {"Authorization": f"Bearer {OTHER_KEY}"}, "different keys"),
               ({"api_key": WRONG_KEY}, {"Authorization": f"Bearer {KEY}"}, "different keys"),
               ({"api_key": [KEY, OTHER_KEY]}, {}, "two api_key values"), ({"api_key": 7}, {}, "must be a string")]
    for fields, headers, message in refused:
        clock[0] += 60.0
        answer = client.post("/libretranslate/translate", json={**form, **fields}, headers=headers)
        assert answer.status_code == 400 and message in answer.json()["error"], answer.text
    clock[0] += 60.0
    answer = client.post("/libretranslate/translate", data={**form, "api_key": [KEY, OTHER_KEY]})
    assert answer.status_code == 400 and "two api_key values" in answer.json()["error"]
    for fields, headers in (({"api_key": KEY}, {"Authorization": f"Bearer {KEY}"}), ({"api_key": ""}, {})):
        clock[0] += 60.0
        headers = headers or {"Authorization": f"Bearer {KEY}"}
        assert client.post("/libretranslate/translate", json={**form, **fields}, headers=headers).status_code == 200
