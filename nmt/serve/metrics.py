"""nmt-serve's Prometheus metrics and access log, written by the `Observe` middleware.

Unknown paths count as "other", so URL scans cannot grow the label set; log lines never hold a text, a key or the
query string.
"""

from __future__ import annotations

import ipaddress
import logging
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request

ACCESS_LOG = logging.getLogger("nmt.serve.access")
STATS = "nmt.stats"  # ASGI scope key
OTHER = "other"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
MAX_LOGGED_PATH = 200


@dataclass
class RequestStats:
    """What a request translates, filled in by its endpoint."""

    sentences: int = 0
    characters: int = 0


def count_sentences(request: Request, lines: Sequence[str]) -> None:
    """Record the sentences a request translates."""
    stats = request.scope.get(STATS)
    if stats is not None:
        stats.sentences += len(lines)
        stats.characters += sum(len(line) for line in lines)


class Metrics:
    """The service's metrics in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("nmt_serve_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=self.registry)
        self.sentences = Counter("nmt_serve_sentences", "sentences translated (answers below 400)", ["endpoint"],
                                 registry=self.registry)
        self.characters = Counter("nmt_serve_characters", "source characters translated (answers below 400)",
                                  ["endpoint"], registry=self.registry)
        self.latency = Histogram("nmt_serve_request_duration_seconds", "time from request to answer",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue = Gauge("nmt_serve_queue_depth", "requests waiting for the decoder", registry=self.registry)
        self.batch = Histogram("nmt_serve_batch_sentences", "sentences decoded by one search", buckets=BATCH_BUCKETS,
                               registry=self.registry)
        self.characters_translated = 0  # DeepL's /v2/usage

    def watch_queue(self, depth: Callable[[], int]) -> None:
        self.queue.set_function(depth)

    def observe(self, endpoint: str, status: int, seconds: float, stats: RequestStats) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)
        if status < 400 and stats.sentences:
            self.sentences.labels(endpoint).inc(stats.sentences)
            self.characters.labels(endpoint).inc(stats.characters)
            self.characters_translated += stats.characters

    def exposition(self) -> tuple[bytes, str]:
        """The metrics as Prometheus text, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def logged_path(path: str) -> str:
    """The path as one log field: percent-encoded, cut short."""
    quoted = urllib.parse.quote(path, safe="/-._~")
    return quoted if len(quoted) <= MAX_LOGGED_PATH else f"{quoted[:MAX_LOGGED_PATH]}..."


def logged_client(client: tuple[str, int] | None) -> str:
    """The client's address as one log field (a malformed forwarded one percent-encoded)."""
    if not client:
        return "-"
    try:
        return str(ipaddress.ip_address(client[0]))
    except ValueError:
        return logged_path(client[0])[:60]


class Observe:
    """ASGI middleware counting each request in `metrics` and logging it to `log` (None: no access log)."""

    def __init__(self, app: Any, metrics: Metrics, endpoints: Iterable[str], log: logging.Logger | None) -> None:
        self.app, self.metrics, self.endpoints, self.log = app, metrics, frozenset(endpoints), log

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stats, status, start = RequestStats(), 500, time.perf_counter()
        scope[STATS] = stats

        async def noting(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            seconds = time.perf_counter() - start
            path = scope.get("path", "")
            self.metrics.observe(path if path in self.endpoints else OTHER, status, seconds, stats)
            if self.log is not None:
                self.log.info("%s %s %s %d %.1fms %d sentences", logged_client(scope.get("client")),
                              scope["method"], logged_path(path), status, 1000 * seconds, stats.sentences)
