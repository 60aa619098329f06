"""The whole nmt-serve application: native, LibreTranslate and DeepL APIs, metrics, keys and Host check."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from fastapi import FastAPI, Request, Response

from nmt.diagnostics import Thresholds
from nmt.serve import deepl, libretranslate
from nmt.serve.app import create_app
from nmt.serve.auth import Access, Guard
from nmt.serve.glossaries import GlossaryStore
from nmt.serve.guard import HostCheck
from nmt.serve.limits import Limits
from nmt.serve.metrics import ACCESS_LOG, Metrics, Observe
from nmt.translator import Translator

OPEN = frozenset({"/health"})
UNLIMITED = frozenset({"/health", "/metrics"})  # scrapers' polls spare the rate


def _error_body(path: str, message: str) -> dict[str, str]:
    return deepl.error_body(message) if path.startswith("/v2/") else {"error": message}


def create_service(translator: Translator, limits: Limits | None = None, thresholds: Thresholds | None = None,
                   wait_ms: float = 5.0, access: Access | None = None,
                   access_log: logging.Logger | None = ACCESS_LOG, allow_origins: tuple[str, ...] = (),
                   allowed_hosts: Iterable[str] | None = None, glossaries: GlossaryStore | None = None) -> FastAPI:
    """The service around `translator`; `access` defaults to anyone, unlimited; `allowed_hosts` None answers any
    Host; `glossaries` defaults to memory."""
    limits, access, metrics = limits or Limits(), access or Access(), Metrics()
    app = create_app(translator, limits, thresholds, wait_ms, on_batch=metrics.batch.observe,
                     allow_origins=allow_origins)
    app.state.metrics = metrics
    libretranslate.add_routes(app, translator, limits, access)
    deepl.add_routes(app, translator, limits, lambda: metrics.characters_translated, access,
                     glossaries or GlossaryStore())

    @app.get("/metrics")
    async def get_metrics(_request: Request) -> Response:
        body, kind = metrics.exposition()
        return Response(body, media_type=kind)

    metrics.watch_queue(lambda: app.state.batcher.queue.qsize() if hasattr(app.state, "batcher") else 0)
    app.add_middleware(Guard, access=access, error_body=_error_body, open_paths=OPEN,
                       own_prefix=libretranslate.PREFIX + "/", unlimited=UNLIMITED)
    if allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=allowed_hosts)
    app.add_middleware(Observe, metrics=metrics, endpoints=[route.path for route in app.routes], log=access_log)
    return app
