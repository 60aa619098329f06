"""DeepL's glossary endpoints on nmt-serve: the official `deepl` client's glossary calls against a real server,
glossaries held per API key and kept in --glossary-dir across a restart, and malformed glossaries refused in
DeepL's error shape while the server stays healthy."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
import warnings

import pytest
import torch

with warnings.catch_warnings():  # starlette's notice that it prefers httpx2 over httpx, which works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

from nmt.errors import DataError, FileError  # noqa: E402
from nmt.glossary import Glossary  # noqa: E402
from nmt.loader import load_translator  # noqa: E402
from nmt.serve.glossaries import GlossaryStore  # noqa: E402
from nmt.serve.service import create_service  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.test_serve import free_port, wait_healthy  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CPU = torch.device("cpu")
KEY, OTHER_KEY = "glossary-key-0123456789abcdef", "other-key-0123456789abcdef"
ENTRIES = {"Mann": "gentleman", "Hund": "puppy"}
SENTENCES = ["Ein Mann geht mit zwei Hunden spazieren.", "Ich wohne in der Nähe vom Bahnhof."]


def start(run, folder, port: int) -> subprocess.Popen:
    with open(folder / "server.log", "a", encoding="utf-8") as err:
        process = subprocess.Popen([sys.executable, "-m", "nmt.serve.command", "-c", str(run), "--port", str(port),
                                    "--api-keys", str(folder / "keys.txt"), "--glossary-dir", str(folder / "kept")],
                                   stderr=err, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    wait_healthy(f"http://127.0.0.1:{port}", process, seconds=300)
    return process


def test_the_deepl_client_creates_lists_reads_uses_and_deletes_a_glossary(trained_run, tmp_path) -> None:
    import deepl

    (tmp_path / "keys.txt").write_text(f"{KEY}\n{OTHER_KEY}\n", encoding="ascii")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(trained_run, tmp_path, port)
    try:
        client, other = deepl.Translator(KEY, server_url=url), deepl.Translator(OTHER_KEY, server_url=url)
        assert [(p.source_lang, p.target_lang) for p in client.get_glossary_languages()] == [("de", "en")]
        info = client.create_glossary("terms", source_lang="DE", target_lang="EN", entries=ENTRIES)
        assert info.entry_count == 2 and info.ready and info.name == "terms"
        assert [g.glossary_id for g in client.list_glossaries()] == [info.glossary_id]
        assert client.get_glossary(info.glossary_id).name == "terms"
        assert client.get_glossary_entries(info) == ENTRIES
        results = client.translate_text(SENTENCES, source_lang="DE", target_lang="EN-US", glossary=info)
        expected = load_translator([trained_run], CPU).translate(SENTENCES, glossary=ENTRIES)
        assert [r.text for r in results] == expected
        assert "gentleman" in expected[0] and "puppy" in expected[0]
        assert other.list_glossaries() == []  # each key has its own glossaries
        with pytest.raises(deepl.GlossaryNotFoundException):
            other.get_glossary(info.glossary_id)
        with pytest.raises(deepl.DeepLException, match="Glossary not found"):
            other.translate_text(SENTENCES[0], source_lang="DE", target_lang="EN-US", glossary=info.glossary_id)
        process.terminate()
        process.wait(120)
        process = start(trained_run, tmp_path, port)  # --glossary-dir keeps them across a restart
        assert client.get_glossary_entries(info) == ENTRIES
        client.delete_glossary(info)
        assert client.list_glossaries() == []
        with pytest.raises(deepl.GlossaryNotFoundException):
            client.delete_glossary(info)
    finally:
        process.terminate()
        process.wait(120)


@pytest.fixture(scope="module")
def local(trained_run, tmp_path_factory):
    store = GlossaryStore(tmp_path_factory.mktemp("glossaries"), limit=3)
    with TestClient(create_service(load_translator([trained_run], CPU), glossaries=store)) as client:
        yield client


def create(client, **fields):
    body = {"name": "g", "source_lang": "de", "target_lang": "en", "entries": "Hund\tdog", **fields}
    return client.post("/v2/glossaries", json={k: v for k, v in body.items() if v is not None})


MALFORMED = [
    ({"entries": "Hund\tdog\nKatze"}, 400, "entries line 2: 1 columns"),
    ({"entries": "Hund\t"}, 400, "entries line 1: empty term"),
    ({"entries": f"Hund\t{'a' * 10_000}"}, 400, "a term of 10,000 characters"),
    ({"entries": "".join(f"w{i}\tx\n" for i in range(100_000))}, 413, "exceeds this server's limit"),
    ({"entries": "Hund,dog", "entries_format": "xlsx"}, 400, "Value for 'entries_format' not supported"),
    ({"target_lang": "fr"}, 400, "Unsupported glossary source and target language pair"),
    ({"name": None}, 400, "Parameter 'name' not specified"),
    ({"entries": ""}, 400, "Parameter 'entries' not specified"),
    ({"entries": "Hund,puppy,fr,es", "entries_format": "csv"}, 400, "entries line 1: the languages 'fr' to 'es'"),
    ({"entries": "Hund\tpuppy\nMann\t狗狗"}, 400, "entries entry 2: the target term '狗狗' holds characters"),
]


@pytest.mark.parametrize("fields,status,message", MALFORMED)
def test_a_malformed_glossary_is_refused_in_deepls_shape_and_the_server_stays_healthy(local, fields, status,
                                                                                      message) -> None:
    answer = create(local, **fields)
    assert answer.status_code == status and set(answer.json()) == {"message"}, answer.text
    assert message in answer.json()["message"]
    assert local.get("/health").status_code == 200 and local.get("/v2/glossaries").status_code == 200


def test_glossaries_are_limited_in_number_and_unknown_ones_are_404(local) -> None:
    made = [create(local).json()["glossary_id"] for _ in range(3)]
    assert "at most 3 glossaries per API key" in create(local).json()["message"]
    assert local.get("/v2/glossaries/nope").status_code == 404
    answer = local.post("/v2/translate", json={"text": ["Ein Hund."], "target_lang": "EN-US", "source_lang": "DE",
                                               "glossary_id": "nope"})
    assert answer.status_code == 404 and answer.json() == {"message": "Glossary not found."}
    assert "source_lang" in local.post("/v2/translate", json={"text": ["Ein Hund."], "target_lang": "EN-US",
                                                               "glossary_id": made[0]}).json()["message"]
    for glossary_id in made:
        assert local.delete(f"/v2/glossaries/{glossary_id}").status_code == 204
    assert create(local, entries='"Hund",dog,de,en', entries_format="csv").json()["entry_count"] == 1


def test_a_glossary_folder_that_cannot_serve_is_one_line(tmp_path) -> None:
    store = GlossaryStore(tmp_path)
    store.create(b"owner", "g", "de", "en", Glossary.of(ENTRIES))
    assert [info.name for info in GlossaryStore(tmp_path).list(b"owner")] == ["g"]
    assert GlossaryStore(tmp_path).list(b"someone else") == []
    with pytest.raises(DataError, match="the glossary name"):
        store.create(b"owner", "", "de", "en", Glossary.of(ENTRIES))
    (next(tmp_path.glob("*/*.json"))).write_text("{", encoding="utf-8")
    with pytest.raises(FileError, match="is not a glossary this server wrote"):
        GlossaryStore(tmp_path)


def test_a_glossary_is_held_as_about_its_text_and_used_as_it_was_given() -> None:
    entries = {f"Wort{i}": f"w{i}" for i in range(9_000)} | ENTRIES  # short terms: the most overhead per byte
    glossary = Glossary.of(entries)
    tsv = glossary.to_tsv()
    store = GlossaryStore()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    infos = [store.create(b"owner", "g", "de", "en", Glossary.parse(tsv)) for _ in range(3)]  # as a request does
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert held < 3 * 2 * len(tsv.encode("utf-8")), (held, len(tsv))  # about its text each, not tens of times it
    built = store.glossary(store.get(b"owner", infos[0].glossary_id))
    assert built == glossary and built.terms_for("Ein Mann und ein Wort7.") == ["gentleman", "w7"]
    for info in infos[1:]:
        assert store.delete(b"owner", info.glossary_id)


def test_glossary_id_with_tag_handling_is_the_documented_400(local) -> None:
    made = create(local).json()["glossary_id"]
    answer = local.post("/v2/translate", json={"text": ["<p>Ein Hund.</p>"], "target_lang": "EN-US",
                                               "source_lang": "DE", "glossary_id": made, "tag_handling": "html"})
    assert answer.status_code == 400 and "cannot be combined with 'tag_handling'" in answer.json()["message"]
    assert (REPO / "docs" / "serve.md").read_text(encoding="utf-8").count("cannot be combined with `tag_handling`")
    assert local.delete(f"/v2/glossaries/{made}").status_code == 204
