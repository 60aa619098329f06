"""nmt-serve against a hostile web, each case with a real `nmt-serve` process: a page that points its own name at
the loopback (DNS rebinding), a client that forges X-Forwarded-For, and the flags that let a reverse proxy in
(--allowed-hosts, --forwarded-allow-ips). Each test sends from its own loopback address (any 127.x.y.z is this
machine), so that each has its own rate bucket."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import httpx
import pytest

from nmt.serve.command import main as serve_main
from tests.test_serve import client_from, start_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BODY = {"src": ["Ein Hund läuft."]}
FORGED = "6.6.6.{} POST /forged 200"  # an X-Forwarded-For that would write a line of its own into the log


def _serve(run: Path, folder: Path, *flags: str):
    """`nmt-serve -c run *flags` with its stderr in folder/server.log: yields (url, port, log)."""
    log = folder / "server.log"
    with open(log, "w", encoding="utf-8") as err:
        process, url = start_server(run, *flags, stderr=err)
    try:
        yield url, url.rsplit(":", 1)[1], log
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def default_server(trained_run, tmp_path_factory):
    """nmt-serve as it starts by default (the loopback, no keys), with 3 requests a minute per client address."""
    yield from _serve(trained_run, tmp_path_factory.mktemp("default"), "--rate-limit", "3/min")


@pytest.fixture(scope="module")
def proxied_server(trained_run, tmp_path_factory):
    """nmt-serve behind a reverse proxy at 127.0.0.2 that serves it as translate.example.org."""
    yield from _serve(trained_run, tmp_path_factory.mktemp("proxied"), "--rate-limit", "3/min",
                      "--forwarded-allow-ips", "127.0.0.2", "--allowed-hosts", "translate.example.org")


def _logged(log: Path, needle: str, count: int) -> list[str]:
    """The access-log lines holding `needle`, once there are `count` (a line is written after its answer)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in log.read_text(encoding="utf-8").splitlines() if needle in line]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_a_page_on_a_rebound_name_is_refused_and_the_servers_own_names_answer(default_server, trained_run):
    url, port, _log = default_server
    rebound = f"rebind.attacker.test:{port}"
    page = {"host": rebound, "origin": f"http://{rebound}"}  # what a browser sends once the name is rebound
    with client_from("127.0.0.8") as client:
        for method, path in (("POST", "/translate"), ("GET", "/metrics"), ("GET", "/health"), ("GET", "/")):
            answer = client.request(method, f"{url}{path}", json=BODY if method == "POST" else None, headers=page)
            assert answer.status_code == 400, (path, answer.status_code)
            assert "is not a name of this server" in answer.json()["error"] and "\n" not in answer.text
        for host in (f"localhost:{port}.attacker.test", f"127.0.0.1.nip.io:{port}", "", "a@localhost"):
            assert client.get(f"{url}/health", headers={"host": host}).status_code == 400, host
        for host in ("127.0.0.1", "localhost", "LOCALHOST", "[::1]", "[0:0::1]"):
            assert client.get(f"{url}/health", headers={"host": f"{host}:{port}"}).status_code == 200, host
        assert client.get(f"{url}/health", headers={"host": "localhost:9000"}).status_code == 200  # ssh -L 9000:..
        own = f"localhost:{port}"
        answer = client.post(f"{url}/translate", json=BODY, headers={"host": own, "origin": f"http://{own}"})
        assert answer.status_code == 200 and len(answer.json()["translations"]) == 1
        assert str(trained_run.parent) not in client.get(f"{url}/health").text  # /health names no file


def test_beyond_the_loopback_without_keys_the_bound_address_and_host_name_answer(trained_run, tmp_path):
    with contextlib.contextmanager(_serve)(trained_run, tmp_path, "--host", "0.0.0.0", "--insecure-no-auth") as (
            url, port, _log):
        for name, status in (("0.0.0.0", 200), (socket.gethostname(), 200), ("127.0.0.1", 200),
                             ("rebind.attacker.test", 400)):
            assert httpx.get(f"{url}/health", headers={"host": f"{name}:{port}"}).status_code == status, name


def test_x_forwarded_for_is_no_client_address_and_never_reaches_the_log(default_server):
    url, _port, log = default_server
    with client_from("127.0.0.1") as client:  # uvicorn's default trusted the loopback's proxy headers
        statuses = [client.post(f"{url}/translate", json=BODY, headers={"x-forwarded-for": FORGED.format(i)})
                    .status_code for i in range(6)]
    assert statuses == [200] * 3 + [429] * 3  # one client, one bucket, whatever the header says
    lines = _logged(log, "127.0.0.1 POST /translate ", 6)
    assert [line.split()[4] for line in lines] == [str(status) for status in statuses]
    assert "6.6.6" not in log.read_text(encoding="utf-8") and "/forged" not in log.read_text(encoding="utf-8")


def test_a_trusted_proxys_client_address_counts_and_its_public_name_is_answered(proxied_server):
    url, port, log = proxied_server
    public = {"host": "translate.example.org", "x-forwarded-proto": "https",
              "origin": "https://translate.example.org"}  # the page as the proxy serves it, over TLS
    with client_from("127.0.0.2") as proxy:
        statuses = [proxy.post(f"{url}/translate", json=BODY, headers={**public, "x-forwarded-for": "203.0.113.7"})
                    .status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]  # the forwarded client's bucket, not the proxy's
        other = proxy.post(f"{url}/translate", json=BODY, headers={**public, "x-forwarded-for": "203.0.113.8"})
        assert other.status_code == 200
        mangled = proxy.get(f"{url}/health", headers={**public, "x-forwarded-for": "evil text here"})
        assert mangled.status_code == 200
        rebound = proxy.get(f"{url}/health", headers={"host": "rebind.attacker.test"})
        assert rebound.status_code == 400 and "--allowed-hosts" in rebound.json()["error"]
    with client_from("127.0.0.3") as stranger:  # not the proxy: its header is not believed
        assert stranger.get(f"{url}/health", headers={"host": f"127.0.0.1:{port}",
                                                       "x-forwarded-for": "198.51.100.1"}).status_code == 200
    assert len(_logged(log, "203.0.113.7 POST /translate ", 4)) == 4
    assert len(_logged(log, "127.0.0.3 GET /health 200", 1)) == 1
    text = log.read_text(encoding="utf-8")
    assert "evil%20text%20here GET /health 200" in text and "evil text" not in text and "198.51.100.1" not in text


def test_proxy_and_host_flags_are_checked_before_the_model_loads(tmp_path, capsys):
    model = str(tmp_path / "no-model")
    assert serve_main(["-c", model, "--forwarded-allow-ips", "127.0.0.1,proxy.local"]) == 2
    assert "--forwarded-allow-ips: got 'proxy.local', allowed: IP addresses or networks" in capsys.readouterr().err
    assert serve_main(["-c", model, "--allowed-hosts", "good.example,bad host"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allowed-hosts 'bad host': expected a host name" in err
