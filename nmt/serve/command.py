"""nmt-serve: the console command that loads the models and runs the service under uvicorn."""

from __future__ import annotations

import asyncio
import signal
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

INSTALL = "pip install -e '.[serve]' (make install does it)"
PORTS = Range(1, 65535)
H11_HEADER_BLOCK = 4 * HeaderLimits().size  # bytes of a request line and headers that uvicorn buffers at most


def _parser() -> Parser:
    parser = Parser(prog="nmt-serve", description=main.__doc__)
    parser.add_argument("-c", "--checkpoint", action="append", required=True, metavar="MODEL",
                        help="run folder, checkpoint file or export folder; repeat it to serve an ensemble")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 lets every "
                             "network the machine is on translate with it, without authentication)")
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
    add_threshold_args(parser, "/attention", shares=False)
    add_decode_args(parser)
    return parser


async def _serve(server: uvicorn.Server, ready: str) -> None:
    """Run `server`, saying `ready` once it listens (uvicorn itself says why when it cannot)."""

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        print(ready, file=sys.stderr, flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await server.serve()
    finally:
        announcer.cancel()


@command
def main(argv: list[str] | None = None) -> int:
    """nmt-serve -c MODEL: translate over HTTP (POST /translate, POST /attention, GET /health) and show the
    attention explorer page at GET /."""
    args = _parser().parse_args(argv)
    try:
        import uvicorn

        from nmt.serve.app import create_app
        from nmt.serve.guard import origin_of
    except ImportError as err:
        raise ConfigError(f"nmt-serve needs the {err.name} package: {INSTALL}") from None
    origins = tuple(origin_of(origin) for origin in args.allow_origin)  # checked before the model loads
    translator = translator_from_args(args.checkpoint, args)
    limits = Limits(args.max_sentences, args.max_chars, args.max_beam)
    thresholds = Thresholds(focused=args.focus_threshold, uniform=args.uniform_threshold)
    app = create_app(translator, limits, thresholds, args.batch_wait_ms, allow_origins=origins)
    # h11 whatever else is installed (httptools bounds no header block); a block that arrives whole is answered by
    # the application's HeaderLimit (431), one larger than H11_HEADER_BLOCK that arrives in pieces by uvicorn (400)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                           timeout_graceful_shutdown=60, http="h11",
                                           h11_max_incomplete_event_size=H11_HEADER_BLOCK))
    name = translator.cfg.name if translator.cfg is not None else args.checkpoint[0]
    received: list[int] = []

    def remember(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)  # uvicorn raises the signal again once it has shut down: that is expected

    previous = {signum: signal.signal(signum, remember) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        asyncio.run(_serve(server, f"nmt-serve: {name} on http://{args.host}:{args.port} (Ctrl-C to stop)"))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not server.started:
        return 1  # uvicorn said why (e.g. the port is taken)
    stop = f" on {signal.Signals(received[0]).name}" if received else ""
    print(f"nmt-serve: stopped{stop}, the requests in flight answered", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
