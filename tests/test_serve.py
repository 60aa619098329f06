"""nmt-serve's API with FastAPI's test client on the shared tiny run: order, equality with nmt-translate,
limits, bad input, batching of concurrent requests, disconnects, failures, and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np
import pytest
import torch

with warnings.catch_warnings():  # starlette's notice that it prefers httpx2 over httpx, which works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

from nmt.cli import translate_main  # noqa: E402
from nmt.errors import ConfigError  # noqa: E402
from nmt.loader import load_translator  # noqa: E402
from nmt.serve.app import ClientGone, Limits, create_app, unless_gone  # noqa: E402
from nmt.serve.batcher import Batcher  # noqa: E402
from nmt.serve.command import main as serve_main  # noqa: E402
from nmt.serve.limits import HeaderLimits  # noqa: E402
from tests.conftest import REPO  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CPU = torch.device("cpu")
LINES = ["Ein Mann fährt mit dem Fahrrad.", "", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.",
         "Kinder spielen auf der Straße."]


@pytest.fixture(scope="module")
def translator(trained_run):
    return load_translator([trained_run], CPU)


@pytest.fixture(scope="module")
def client(translator):
    app = create_app(translator, Limits(max_sentences=8, max_chars=400, max_beam=4))
    with TestClient(app) as test_client:
        yield test_client


def _nmt_translate(run: Path, folder: Path, lines: list[str], *flags: str) -> list[str]:
    src, out = folder / "in.de", folder / "out.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert translate_main(["-c", str(run), "-i", str(src), "-o", str(out), *flags]) == 0
    return out.read_text(encoding="utf-8").split("\n")[:-1]


JSON = {"content-type": "application/json"}


def _one_line_error(response, status: int) -> str:
    assert response.status_code == status, response.text
    assert "\n" not in response.text and set(response.json()) == {"error"}
    return response.json()["error"]


def test_translate_keeps_order_and_equals_nmt_translate(client, trained_run, tmp_path):
    answer = client.post("/translate", json={"src": LINES}).json()
    assert answer["translations"] == _nmt_translate(trained_run, tmp_path, LINES)
    assert answer["translations"][1] == "" and answer["scores"][1] is None
    swapped = client.post("/translate", json={"src": LINES[::-1]}).json()["translations"]
    assert swapped == answer["translations"][::-1]


def test_settings_equal_the_cli_flags(client, trained_run, tmp_path):
    lines = [LINES[0], LINES[2]]
    answer = client.post("/translate", json={"src": lines, "beam": 3, "n_best": 2, "length_penalty": 0.6}).json()
    rows = _nmt_translate(trained_run, tmp_path, lines, "--beam", "3", "--n-best", "2", "--length-penalty", "0.6")
    assert [[h["text"] for h in hyps] for hyps in answer["n_best"]] == [
        [row.split(" ||| ")[1] for row in rows if row.startswith(f"{i} ||| ")] for i in range(2)]
    assert answer["settings"] == {"beam": 3, "n_best": 2, "length_penalty": 0.6, "split_sentences": "on"}
    assert answer["translations"] == [hyps[0]["text"] for hyps in answer["n_best"]]


def test_empty_list_gives_empty_list(client):
    assert client.post("/translate", json={"src": []}).json()["translations"] == []


@pytest.mark.parametrize("body,status,words", [
    (b"{not json", 400, "not valid JSON"),
    (b"\xff\xfe", 400, "not valid JSON"),
    (b"[" * 100_000, 413, "exceeds"),
    (b"[" * 3000 + b"]" * 3000, 400, "not valid JSON"),
    (b'["a"]', 400, "JSON object"),
    (b'{"text": ["a"]}', 400, "unknown field 'text'"),
    (b'{"beam": 2}', 400, "missing field 'src'"),
    (b'{"src": "Ein Hund."}', 400, "list of strings"),
    (b'{"src": ["a", 3]}', 400, "strings only"),
    (b'{"src": ["\\ud800"]}', 400, "surrogate"),
    (b'{"src": ["a"], "beam": "5"}', 400, "beam must be an integer"),
    (b'{"src": ["a"], "beam": 2.5}', 400, "beam must be an integer"),
    (b'{"src": ["a"], "beam": true}', 400, "beam must be an integer"),
    (b'{"src": ["a"], "beam": 0}', 422, "beam: got 0"),
    (b'{"src": ["a"], "beam": 5}', 422, "at most 4"),
    (b'{"src": ["a"], "beam": 1e400}', 400, "beam must be an integer"),
    (b'{"src": ["a"], "n_best": 3, "beam": 2}', 422, "n_best (3) cannot exceed beam (2)"),
    (b'{"src": ["a"], "length_penalty": -1}', 422, "length_penalty"),
    (b'{"src": ["a"], "length_penalty": NaN}', 422, "length_penalty"),
    (b'{"src": ["a"] ,"length_penalty": [1]}', 400, "length_penalty must be a number"),
    (b'{"src": ["a"], "length_penalty": 1000}', 422, "length_penalty: got 1000, allowed"),
    (b'{"src": ["a"], "length_penalty": 1e300}', 422, "length_penalty: got 1e+300, allowed"),
    (b'{"src": ["a"], "length_penalty": 1e400}', 422, "length_penalty: got inf, allowed"),
    (b'{"src": ["a"], "length_penalty": -Infinity}', 422, "length_penalty: got -inf, allowed"),
    (b'{"src": ["a"], "beam": 1, "n_best": 1000000000000000000000000000000}', 422, "n_best: got 1000000"),
])
def test_bad_input_is_a_one_line_4xx(client, body, status, words):
    assert words in _one_line_error(client.post("/translate", content=body, headers=JSON), status)


def test_overflowing_numbers_are_refused_where_they_enter(tmp_path, capsys):
    for flag in ("--batch-wait-ms", "--max-chars", "--max-sentences", "--max-beam", "--port"):
        for value in ("1e300", "inf", "nan", "-1"):
            assert serve_main(["-c", str(tmp_path), flag, value]) == 2
            assert f"{flag}: got '{value}', allowed:" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="max_chars: got 10000000000"):
        Limits(max_chars=10**30)
    with pytest.raises(ConfigError, match="wait_ms: got inf"):
        Batcher(object(), wait_ms=math.inf)  # refused before it touches the translator
    with pytest.raises(ConfigError, match="header size: got 0"):
        HeaderLimits(size=0)


def test_limits_answer_413(client):
    assert "at most 8" in _one_line_error(client.post("/translate", json={"src": ["a"] * 9}), 413)
    assert "at most 400" in _one_line_error(client.post("/translate", json={"src": ["ä" * 201] * 2}), 413)
    assert "at most 400" in _one_line_error(client.post("/attention", json={"src": "x" * 401}), 413)
    huge = json.dumps({"src": ["x" * 10_000]})
    assert "limit of 9024 bytes" in _one_line_error(client.post("/translate", content=huge, headers=JSON), 413)


def test_the_body_limit_takes_max_chars_in_any_json_encoding(translator):
    """2,000 emoji are within --max-chars 2000; escaped as JSON (\\ud83d\\ude00 each) they take 24,000 bytes."""
    body = json.dumps({"src": ["\U0001F600" * 1000] * 2}, ensure_ascii=True)
    assert len(body) > 8 * 2000 + 4096  # what the body limit was: 8 bytes a character and 4 kB
    with TestClient(create_app(translator, Limits(max_chars=2000))) as test_client:
        answer = test_client.post("/translate", content=body, headers=JSON)
        assert answer.status_code == 200 and len(answer.json()["translations"]) == 2
        over = json.dumps({"src": ["\U0001F600" * 2001]}, ensure_ascii=True)
        assert "at most 2000" in _one_line_error(test_client.post("/translate", content=over, headers=JSON), 413)


def test_echoed_input_is_cut_to_a_marked_excerpt(translator):
    with TestClient(create_app(translator)) as test_client:
        answer = test_client.post("/translate", json={"src": ["a"], "x" * 50_000: 1})
        message = _one_line_error(answer, 400)
        assert len(answer.content) < 300 and "(50,000 characters in all)" in message and "x" * 60 in message
        origin = "http://" + "y" * 10_000 + ".example"
        answer = test_client.post("/translate", json={"src": ["a"]}, headers={"origin": origin})
        assert "(10,015 characters in all)" in _one_line_error(answer, 403) and len(answer.content) < 400


@pytest.mark.parametrize("path,body", [("/translate", '{"src": ["Ein Hund."]}'),
                                       ("/attention", '{"src": "Ein Hund."}')])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          None])
def test_a_body_a_browser_may_send_to_another_site_unasked_is_415(client, path, body, content_type):
    headers = {"content-type": content_type} if content_type else {}
    assert "Content-Type: application/json" in _one_line_error(client.post(path, content=body, headers=headers), 415)
    sent = client.post(path, content=body, headers={"content-type": "application/json; charset=utf-8"})
    assert sent.status_code == 200


def test_pages_of_other_origins_are_refused_unless_allowed(translator):
    allowed = "https://tools.example.org"
    with TestClient(create_app(translator)) as plain, \
            TestClient(create_app(translator, allow_origins=(allowed,))) as open_to_one:
        for test_client in (plain, open_to_one):
            for origin in ("http://evil.example", "null", "http://testserver.evil.example"):
                answer = test_client.post("/translate", json={"src": ["a"]}, headers={"origin": origin})
                assert "is refused" in _one_line_error(answer, 403)
                assert "access-control-allow-origin" not in answer.headers
            own = test_client.post("/translate", json={"src": ["a"]}, headers={"origin": "http://testserver"})
            assert own.status_code == 200 and "access-control-allow-origin" not in own.headers
            assert test_client.post("/translate", json={"src": ["a"]}).status_code == 200  # no Origin: not a page
        assert plain.post("/translate", json={"src": ["a"]}, headers={"origin": allowed}).status_code == 403
        preflight = {"origin": allowed, "access-control-request-method": "POST",
                     "access-control-request-headers": "content-type"}
        assert "access-control-allow-origin" not in plain.options("/translate", headers=preflight).headers
        answer = open_to_one.post("/translate", json={"src": ["a"]}, headers={"origin": allowed})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == allowed
        assert open_to_one.options("/translate", headers=preflight).headers["access-control-allow-origin"] == allowed
    with pytest.raises(ConfigError, match="expected an origin"):
        create_app(translator, allow_origins=("https://example.org/path",))


def test_requests_with_too_many_or_too_large_headers_are_431(client):
    many = {f"x-h{i}": "v" * 90 for i in range(400)}  # 400 headers of 100 bytes
    assert "at most 100 lines of 16384 bytes" in _one_line_error(client.post("/translate", json={"src": ["a"]},
                                                                             headers=many), 431)
    large = {"x-large": "v" * 17_000}
    assert "at most 100 lines of 16384 bytes" in _one_line_error(client.get("/health", headers=large), 431)
    assert client.get("/health", headers={f"x-h{i}": "v" for i in range(90)}).status_code == 200


def test_unknown_routes_and_methods_are_one_line_json(client):
    _one_line_error(client.get("/nothing"), 404)
    _one_line_error(client.get("/translate"), 405)


def test_health_names_the_model_but_no_file_path(client, trained_run):
    answer = client.get("/health")
    health = answer.json()
    assert health["status"] == "ok" and health["name"] == "shared" and health["attention"] is True
    assert len(health["sha256"]) == 64 and health["settings"]["decode"]["beam"] == 2
    assert health["settings"]["members"][0]["sha256"] == health["sha256"]
    assert "path" not in health["settings"]["members"][0] and str(trained_run.parent) not in answer.text


def test_attention_has_every_layer_and_head_and_diagnostics(client, translator):
    sentence = LINES[2]
    answer = client.post("/attention", json={"src": sentence}).json()
    src, tgt = answer["src"], answer["tgt"]
    assert src[-1] == tgt[-1] == "</s>"
    assert answer["translation"] == client.post("/translate", json={"src": [sentence]}).json()["translations"][0]
    weights = np.array(answer["attention"])  # (T, S)
    assert weights.shape == (len(tgt), len(src)) and np.allclose(weights.sum(-1), 1.0, atol=1e-3)
    model = translator.engine.model
    assert [layer["name"] for layer in answer["layers"]] == [f"layer {i + 1}" for i in range(len(model.decoder_layers))]
    heads = np.array(answer["layers"][-1]["heads"])  # (h, T, S)
    assert heads.shape == (model.heads, len(tgt), len(src))
    assert np.allclose(heads.mean(0), weights, atol=1e-3)  # the search's weights: last layer, mean of heads
    diagnostics = answer["diagnostics"]
    assert len(diagnostics["row_flags"]) == len(diagnostics["row_entropy"]) == len(tgt)
    assert set(diagnostics) >= {"mean_entropy", "focused_share", "uniform_share", "flags"}


def test_attention_bad_input(client):
    assert "one sentence" in _one_line_error(client.post("/attention", json={"src": ["a", "b"]}), 400)
    assert "n_best" in _one_line_error(client.post("/attention", json={"src": "a", "n_best": 2}), 400)
    blank = client.post("/attention", json={"src": "   "}).json()
    assert blank["tgt"] == [] and blank["translation"] == ""


def test_export_translates_but_has_no_attention(trained_run, tmp_path):
    from nmt.export import export_ctranslate2

    export_ctranslate2(trained_run / "checkpoints" / "best.pt", tmp_path / "ct2", "float32")
    with TestClient(create_app(load_translator([tmp_path / "ct2"], CPU))) as export_client:
        assert len(export_client.post("/translate", json={"src": LINES}).json()["translations"]) == len(LINES)
        assert "exported model" in _one_line_error(export_client.post("/attention", json={"src": "a"}), 400)
        assert export_client.get("/health").json()["attention"] is False


def test_concurrent_requests_are_decoded_together(translator):
    sentences = [f"{LINES[i % 5]} {i}" for i in range(8)]
    with TestClient(create_app(translator, wait_ms=0)) as test_client:  # one at a time: no batch window to wait
        alone = [test_client.post("/translate", json={"src": [s]}).json()["translations"][0] for s in sentences]
    app = create_app(translator, wait_ms=400)
    with TestClient(app) as test_client:
        before = app.state.batcher.batches
        with ThreadPoolExecutor(len(sentences)) as pool:
            answers = list(pool.map(lambda s: test_client.post("/translate", json={"src": [s]}), sentences))
        batches = app.state.batcher.batches - before
    assert [a.json()["translations"][0] for a in answers] == alone
    assert batches < len(sentences), batches


def test_requests_queued_while_the_worker_is_busy_form_one_batch_even_without_a_wait(translator):
    async def scenario() -> tuple[int, list]:
        batcher = Batcher(translator, wait_ms=0)  # no waiting for arrivals: only what is already queued joins
        release = threading.Event()
        busy = asyncio.ensure_future(batcher.run(lambda: release.wait(10)))  # holds the worker
        await asyncio.sleep(0.05)
        queued = [asyncio.ensure_future(batcher.translate(translator.prepare([line]), translator.decode))
                  for line in LINES]
        await asyncio.sleep(0.05)
        release.set()
        results = await asyncio.gather(*queued)
        await busy
        await asyncio.to_thread(batcher.close)
        return batcher.batches, results

    batches, results = asyncio.run(scenario())
    alone = [translator.translate_nbest(line) for line in LINES]
    assert batches == 1
    assert [[t.text for t in result[0]] for result in results] == [[t.text for t in n] for n in alone]


def test_a_cancelled_request_is_never_decoded(translator):
    async def scenario() -> tuple[int, list]:
        batcher = Batcher(translator, wait_ms=200)
        gone = asyncio.ensure_future(batcher.translate(translator.prepare(["Ein Hund."]), translator.decode))
        await asyncio.sleep(0.01)
        gone.cancel()  # the client went away while the batch was still collecting
        kept = await batcher.translate(translator.prepare(["Eine Frau."]), translator.decode)
        await asyncio.to_thread(batcher.close)
        return batcher.batches, kept

    batches, kept = asyncio.run(scenario())
    assert batches == 1 and len(kept) == 1 and kept[0]


def test_a_client_that_disconnects_is_not_decoded(translator):
    class Gone:  # a request whose client has already hung up
        async def receive(self) -> dict:
            return {"type": "http.disconnect"}

    async def scenario() -> int:
        batcher = Batcher(translator, wait_ms=100)
        with pytest.raises(ClientGone):
            await unless_gone(Gone(), batcher.translate(translator.prepare(["Ein Hund."]), translator.decode))
        await asyncio.to_thread(batcher.close)
        return batcher.batches

    assert asyncio.run(scenario()) == 0


def test_ensemble_attention_has_each_models_layers(trained_run):
    app = create_app(load_translator([trained_run, trained_run / "checkpoints" / "last.pt"], CPU))
    with TestClient(app) as test_client:
        answer = test_client.post("/attention", json={"src": LINES[0]}).json()
        assert [layer["name"] for layer in answer["layers"]] == ["model 1 layer 1", "model 2 layer 1"]
        assert len(test_client.get("/health").json()["sha256"]) == 2


def test_a_failing_batch_answers_500_and_the_server_goes_on(translator, monkeypatch):
    app = create_app(translator)
    calls = []
    search = translator.engine.search

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom\nsecond line")
        return search(*args, **kwargs)

    monkeypatch.setattr(translator.engine, "search", flaky)
    with TestClient(app) as test_client:
        assert "boom second line" in _one_line_error(test_client.post("/translate", json={"src": ["a"]}), 500)
        assert test_client.post("/translate", json={"src": ["a"]}).status_code == 200


def test_command_line_errors_are_one_line(tmp_path, capsys):
    assert serve_main(["-c", str(tmp_path / "missing")]) == 1
    assert serve_main(["-c", str(tmp_path), "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "missing" in err and "--port" in err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, seconds: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else "nmt-serve exited"
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise AssertionError("nmt-serve did not answer /health in time")


def client_from(address: str):
    """An httpx client whose connections come from `address` (any 127.x.y.z is this machine): a client address,
    and so a rate bucket, of a test's own."""
    import httpx

    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30.0)


def start_server(run: Path, *flags: str, stderr: IO[str] | int = subprocess.PIPE) -> tuple[subprocess.Popen, str]:
    """`nmt-serve -c run` on a free loopback port, once it answers; returns the process and its URL. Its stderr is
    a pipe unless given (a file, for a server that lives long enough to fill a pipe with its access log)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "nmt.serve.command", "-c", str(run), "--port", str(port),
                                *flags], stderr=stderr, text=True, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
    except BaseException:
        process.kill()
        raise
    return process, url


@pytest.mark.slow
def test_sigterm_finishes_requests_in_flight(trained_run):
    import httpx

    process, url = start_server(trained_run, "--batch-wait-ms", "1500")
    answers = []
    try:
        sender = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{url}/translate", json={"src": LINES}, timeout=30.0)))
        sender.start()
        time.sleep(0.6)  # the request has arrived (even on a busy machine) and waits in the batch window
        process.send_signal(signal.SIGTERM)
        sender.join(30)
        assert process.wait(30) == 0
    finally:
        process.kill()
    assert answers and answers[0].status_code == 200 and len(answers[0].json()["translations"]) == len(LINES)
    log = process.stderr.read()
    assert "stopped on SIGTERM" in log and "Traceback" not in log


def _raw(port: int, *parts: bytes, pause: float = 0.0) -> bytes:
    """Send `parts` over one connection (pausing between them; a server that has answered may close it before the
    last), then read what comes back until the server closes or a second passes."""
    with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
        try:
            for part in parts:
                sock.sendall(part)
                time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return b""


@pytest.mark.slow
def test_hostile_traffic_leaves_the_server_healthy_and_its_log_without_a_traceback(trained_run):
    import httpx

    process, url = start_server(trained_run)
    port = int(url.rsplit(":", 1)[1])
    head = b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    try:
        for _ in range(5):  # hang up halfway through the body (starlette's ClientDisconnect)
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(head + b'Content-Length: 1000\r\n\r\n{"src": [')
                time.sleep(0.1)
        body = json.dumps({"src": LINES}).encode()
        with socket.create_connection(("127.0.0.1", port)) as sock:  # hang up while the batch is decoded
            sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        pieces = [b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"] + [b"X-Pad: " + b"v" * 8000 + b"\r\n"] * 10
        assert _raw(port, *pieces, pause=0.02).startswith(b"HTTP/1.1 400")  # beyond uvicorn's header buffer
        statuses = [httpx.post(f"{url}/translate", json={"src": ["a"], "length_penalty": 1000}).status_code,
                    httpx.post(f"{url}/translate", content=body, headers={"content-type": "text/plain"}).status_code,
                    httpx.post(f"{url}/translate", json={"src": ["a"]},
                               headers={"origin": "http://evil.example"}).status_code,
                    httpx.post(f"{url}/translate", json={"src": ["a"]},
                               headers={f"x-h{i}": "v" * 90 for i in range(400)}).status_code]
        healthy = httpx.post(f"{url}/translate", json={"src": LINES}, timeout=30.0)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        process.kill()
    log = process.stderr.read()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert statuses == [422, 415, 403, 431] and len(healthy.json()["translations"]) == len(LINES)
