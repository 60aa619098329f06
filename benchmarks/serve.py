"""Throughput and latency of nmt-serve: N one-sentence requests from C concurrent clients over the loopback.

Usage: python -m benchmarks.serve RUN [--clients 1 8 32] [--requests 256] [--seconds 60] [--split test]
       [--batch-wait-ms 5] [--beam B] [--apis native libretranslate]

Starts `nmt-serve -c RUN` on a free loopback port in its own process, sends each level's requests (one test
sentence each, cycled) from C clients at once, each waiting for its answer before sending the next, and
writes benchmarks/results/serve_<run name>_<device>.json: per level sentences/s and p50/p95 latency, with
the model's sha256 and training updates, the date, the command and the machine. A level stops after
--requests requests or --seconds seconds, whichever comes first. With --apis, each level is run through each
API in turn against the same server: `native` posts {"src": [sentence]} to /translate, `libretranslate` posts
the form that libretranslatepy sends (q, source, target) to /libretranslate/translate; `vs_native` is each
API's sentences/s over the native API's at the same level.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from benchmarks.common import (
    add_out_dir,
    arguments,
    command_line,
    module_command,
    module_env,
    prog,
    run_name,
    write_result,
)
from nmt.cli import Parser, command, number
from nmt.config import AT_LEAST_ONE, NON_NEGATIVE
from nmt.errors import ConfigError
from nmt.evaluation import split_pair
from nmt.loader import load_translator

MODULE = "benchmarks.serve"
START_SECONDS = 120.0
NATIVE = "native"
APIS = {NATIVE: ("/translate", lambda sentence: {"json": {"src": [sentence]}}),
        "libretranslate": ("/libretranslate/translate",
                           lambda sentence: {"data": {"q": sentence, "source": "de", "target": "en"}})}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run folder, checkpoint file or export folder")
    parser.add_argument("--clients", type=number(AT_LEAST_ONE, integer=True), nargs="+", default=[1, 8, 32],
                        help="concurrent clients of each level (default 1 8 32)")
    parser.add_argument("--requests", type=number(AT_LEAST_ONE, integer=True), default=256,
                        help="requests per level, one sentence each (default 256)")
    parser.add_argument("--seconds", type=number(AT_LEAST_ONE), default=60.0,
                        help="time limit of each level (default 60)")
    parser.add_argument("--split", default="test", help="split whose sources are sent (default: test)")
    parser.add_argument("--batch-wait-ms", type=number(NON_NEGATIVE), default=5.0,
                        help="nmt-serve's batch window (default 5)")
    parser.add_argument("--beam", type=number(AT_LEAST_ONE, integer=True), default=None,
                        help="beam size (default: the one stored with the model)")
    parser.add_argument("--apis", nargs="+", choices=sorted(APIS), default=[NATIVE],
                        help="the APIs each level is sent through, in turn (default: native)")
    add_out_dir(parser)
    return parser.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    """nmt-serve in its own process, once it answers /health."""
    import httpx

    port = _free_port()
    flags = ["--batch-wait-ms", str(args.batch_wait_ms)] + (["--beam", str(args.beam)] if args.beam else [])
    process = subprocess.Popen(module_command("nmt.serve.command", "-c", args.run, "--port", str(port), *flags),
                               env=module_env())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise ConfigError(f"nmt-serve did not come up within {START_SECONDS:.0f} s (see its error above)")


async def _level(url: str, sentences: list[str], clients: int, requests: int, seconds: float,
                 api: str = NATIVE) -> dict[str, Any]:
    """Send up to `requests` requests from `clients` clients for at most `seconds` through `api`."""
    import httpx

    path, request = APIS[api]
    latencies: list[float] = []
    sent = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=limits) as http:

        async def client() -> None:
            nonlocal sent
            while sent < requests and time.monotonic() < deadline:
                sentence = sentences[sent % len(sentences)]
                sent += 1
                start = time.perf_counter()
                answer = await http.post(path, **request(sentence))
                answer.raise_for_status()
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - start
    ordered = sorted(latencies)
    return {"api": api, "clients": clients, "requests": len(latencies), "seconds": round(wall, 3),
            "sentences_per_s": round(len(latencies) / wall, 2),
            "p50_ms": round(1000 * statistics.median(ordered), 1),
            "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1)}


@command
def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    translator = load_translator([args.run], torch.device("cpu"))
    sentences = [line for line in split_pair(translator.cfg, args.split)[0] if line.strip()]
    member = translator.members[0]
    run = run_name(member.path, translator.cfg.name)
    del translator  # the server loads its own copy
    process, url = _start(args)
    try:
        for api in args.apis:
            asyncio.run(_level(url, sentences, 1, min(4, args.requests), args.seconds, api))  # warm-up
        levels = []
        for clients in args.clients:
            for api in args.apis:
                levels.append(asyncio.run(_level(url, sentences, clients, args.requests, args.seconds, api)))
                level = levels[-1]
                print(f"{clients:3d} clients, {api}: {level['sentences_per_s']:.1f} sentences/s, p50 "
                      f"{level['p50_ms']:.0f} ms, p95 {level['p95_ms']:.0f} ms ({level['requests']} requests)")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    rate = {(level["api"], level["clients"]): level["sentences_per_s"] for level in levels}
    first = args.clients[0]
    result = {"benchmark": "serve", "run": run, "checkpoint": member.path, "sha256": member.sha256,
              "updates": member.steps, "arch": member.arch, "device": "cpu", "split": args.split,
              "batch_wait_ms": args.batch_wait_ms, "beam": args.beam, "apis": args.apis, "levels": levels,
              "speedup": {api: {str(clients): round(rate[api, clients] / rate[api, first], 2)
                                for clients in args.clients} for api in args.apis},
              "vs_native": {api: {str(clients): round(rate[api, clients] / rate[NATIVE, clients], 3)
                                  for clients in args.clients} for api in args.apis if api != NATIVE}
              if NATIVE in args.apis else {},
              "server": shlex.join(["nmt-serve", "-c", args.run, "--batch-wait-ms", str(args.batch_wait_ms)])}
    out = args.out_dir / f"serve_{run}_cpu.json"
    write_result(out, torch.device("cpu"), command_line(MODULE, argv), result)
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
