"""nmt-serve: the console command that loads the models and runs the service under uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import re
import signal
import socket
import sys
from types import FrameType
from typing import TYPE_CHECKING

from nmt.cli import Parser, add_decode_args, add_threshold_args, command, number, translator_from_args
from nmt.config import Range
from nmt.diagnostics import Thresholds
from nmt.errors import ConfigError
from nmt.serve.limits import WAIT_MS, HeaderLimits, Limits

if TYPE_CHECKING:
    import uvicorn

    from nmt.serve.auth import KeyRing

INSTALL = "pip install -e '.[serve]' (make install does it)"
PORTS = Range(1, 65535)
MAX_RATE = 1_000_000  # requests a minute
H11_HEADER_BLOCK = 4 * HeaderLimits().size  # bytes of a request line and headers that uvicorn buffers at most
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def rate(text: str) -> int:
    """An argparse type: N/min, the requests a key may send a minute."""
    found = re.fullmatch(r"\s*(\d{1,7})\s*/\s*min\s*", text)
    if found is None or not 1 <= int(found.group(1)) <= MAX_RATE:
        raise argparse.ArgumentTypeError(f"got {text[:40]!r}, allowed: N/min with N in [1, {MAX_RATE}]")
    return int(found.group(1))


def loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxies(text: str) -> list[str]:
    """An argparse type: comma-separated addresses or networks of trusted proxies (uvicorn's
    --forwarded-allow-ips without its `*`)."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {entry[:60]!r}, allowed: IP addresses or networks "
                                             "(10.0.0.5, 172.16.0.0/12, ::1), comma-separated") from None
    if not entries:
        raise argparse.ArgumentTypeError("got no address, allowed: IP addresses or networks, comma-separated")
    return entries


def own_hosts(host: str) -> list[str]:
    """The Host names of a server bound to `host`, any port (tunnels and port mappings change it)."""
    names = list(LOOPBACK_NAMES)
    if not loopback(host):
        address = host.partition("%")[0]  # a browser sends no IPv6 zone (fe80::1%eth0)
        names += [f"[{address}]" if ":" in address else address, socket.gethostname()]
    return names


def _reload(keys: KeyRing) -> None:
    """Read the key file again, saying in one line what came of it; the keys in use stay when it cannot be used."""
    try:
        said = f"{keys.reload()} API keys read from {keys.path}"
    except ConfigError as err:
        said = f"{err}; the {len(keys)} keys in use stay"
    print(f"nmt-serve: SIGHUP: {said}", file=sys.stderr, flush=True)


def _parser() -> Parser:
    parser = Parser(prog="nmt-serve", description=main.__doc__)
    parser.add_argument("-c", "--checkpoint", action="append", required=True, metavar="MODEL",
                        help="run folder, checkpoint file or export folder; repeat it to serve an ensemble")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; any other address needs "
                             "--api-keys or --insecure-no-auth)")
    parser.add_argument("--port", type=number(PORTS, integer=True), default=8000, help="TCP port (default 8000)")
    parser.add_argument("--max-sentences", type=number(Limits.BOUNDS["max_sentences"], integer=True), default=64,
                        help="sentences per request (more: 413)")
    parser.add_argument("--max-chars", type=number(Limits.BOUNDS["max_chars"], integer=True), default=20_000,
                        help="characters per request, all sentences together (more: 413)")
    parser.add_argument("--max-beam", type=number(Limits.BOUNDS["max_beam"], integer=True), default=16,
                        help="the largest beam a request may ask for")
    parser.add_argument("--batch-wait-ms", type=number(WAIT_MS), default=5.0,
                        help="how long the decoder waits for more requests to join a batch")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a web page origin (https://example.org) whose pages may call the API from the browser, "
                             "with CORS headers; repeatable (default: only the server's own page)")
    parser.add_argument("--api-keys", metavar="FILE",
                        help="one key a line; every endpoint but /health then needs one (re-read on SIGHUP)")
    parser.add_argument("--insecure-no-auth", action="store_true",
                        help="listen beyond the loopback without --api-keys: anyone who reaches the port may call")
    parser.add_argument("--allowed-hosts", type=lambda text: text.split(","), action="extend", default=[],
                        metavar="NAMES",
                        help="comma-separated Host names (name or name:port) answered besides the server's own: "
                             "a proxy's public name, a LAN address. Without --api-keys any other Host is refused "
                             "(DNS rebinding); with keys, only when this is given")
    parser.add_argument("--forwarded-allow-ips", type=proxies, action="extend", metavar="IPS",
                        help="comma-separated addresses or networks of reverse proxies whose X-Forwarded-For and "
                             "X-Forwarded-Proto are believed (default: none, the socket's address is the client)")
    parser.add_argument("--rate-limit", type=rate, metavar="N/min",
                        help="requests a minute per key (per client address without keys); more: 429")
    parser.add_argument("--no-access-log", action="store_true", help="no access-log line per request on stderr")
    parser.add_argument("--glossary-dir", metavar="DIR",
                        help="keep the glossaries of DeepL's /v2/glossaries here, so that they outlive a restart "
                             "(default: in memory only)")
    add_threshold_args(parser, "/attention", shares=False)
    add_decode_args(parser)
    return parser


async def _serve(server: uvicorn.Server, ready: str, keys: KeyRing | None) -> None:
    """Run `server`, saying `ready` once it listens, and re-read `keys` on SIGHUP in the event loop (a signal
    handler may interrupt a line being written)."""

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        print(ready, file=sys.stderr, flush=True)

    loop = asyncio.get_running_loop()
    if keys is not None:
        loop.add_signal_handler(signal.SIGHUP, _reload, keys)
    announcer = asyncio.create_task(announce())
    try:
        await server.serve()
    finally:
        announcer.cancel()
        if keys is not None:
            loop.remove_signal_handler(signal.SIGHUP)


@command
def main(argv: list[str] | None = None) -> int:
    """nmt-serve -c MODEL: translate over HTTP (POST /translate, POST /attention, GET /health), with
    LibreTranslate's API under /libretranslate/, DeepL's under /v2/ and Prometheus metrics at GET /metrics,
    and show the attention explorer page at GET /."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not loopback(args.host) and args.api_keys is None and not args.insecure_no_auth:
        parser.error(f"--host {args.host[:60]} is reachable from other machines: give --api-keys FILE, or "
                     "--insecure-no-auth to let anyone who reaches the port call")
    try:
        import uvicorn

        from nmt.serve.auth import Access, KeyRing, RateLimit
        from nmt.serve.glossaries import GlossaryStore
        from nmt.serve.guard import allowed_host, origin_of
        from nmt.serve.metrics import ACCESS_LOG
        from nmt.serve.service import create_service
    except ImportError as err:
        raise ConfigError(f"nmt-serve needs the {err.name} package: {INSTALL}") from None
    keys = KeyRing(args.api_keys) if args.api_keys is not None else None
    if keys is None and not loopback(args.host):
        print(f"nmt-serve: warning: listening on {args.host} without API keys (--insecure-no-auth): anyone who "
              "reaches the port can translate and read /metrics", file=sys.stderr)
    origins = tuple(origin_of(origin) for origin in args.allow_origin)  # checked before the model loads
    listed = [allowed_host(name) for name in args.allowed_hosts]
    hosts = None if keys is not None and not listed else own_hosts(args.host) + listed
    glossaries = GlossaryStore(args.glossary_dir)  # before the model loads: a folder that cannot serve fails fast
    translator = translator_from_args(args.checkpoint, args)
    limits = Limits(args.max_sentences, args.max_chars, args.max_beam)
    thresholds = Thresholds(focused=args.focus_threshold, uniform=args.uniform_threshold)
    access = Access(keys, RateLimit(args.rate_limit) if args.rate_limit else None)
    app = create_service(translator, limits, thresholds, args.batch_wait_ms, access,
                         None if args.no_access_log else ACCESS_LOG, origins, hosts, glossaries)
    # h11, as httptools bounds no header block
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                           access_log=False, timeout_graceful_shutdown=60, http="h11",
                                           h11_max_incomplete_event_size=H11_HEADER_BLOCK,
                                           proxy_headers=args.forwarded_allow_ips is not None,
                                           forwarded_allow_ips=args.forwarded_allow_ips))
    name = translator.cfg.name if translator.cfg is not None else args.checkpoint[0]
    received: list[int] = []

    def remember(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)  # uvicorn re-raises it after shutting down

    # SIGHUP ignored until _serve takes it, so an early one cannot end the process
    handlers = {signal.SIGINT: remember, signal.SIGTERM: remember} | ({signal.SIGHUP: signal.SIG_IGN} if keys else {})
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    log = logging.StreamHandler(sys.stderr)
    log.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    kept = ACCESS_LOG.level, ACCESS_LOG.propagate
    ACCESS_LOG.addHandler(log)
    ACCESS_LOG.setLevel(logging.INFO)
    ACCESS_LOG.propagate = False
    keyed = f"{len(keys)} API keys, " if keys else ""
    try:
        asyncio.run(_serve(server, f"nmt-serve: {name} on http://{args.host}:{args.port} ({keyed}Ctrl-C to stop)",
                           keys))
    finally:
        ACCESS_LOG.removeHandler(log)
        ACCESS_LOG.level, ACCESS_LOG.propagate = kept
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not server.started:
        return 1  # uvicorn said why (e.g. the port is taken)
    stop = f" on {signal.Signals(received[0]).name}" if received else ""
    print(f"nmt-serve: stopped{stop}, the requests in flight answered", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
