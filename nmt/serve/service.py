"""Everything nmt-serve answers: the native API and page (`app.create_app`), LibreTranslate's API under
/libretranslate/, DeepL's under /v2/, GET /metrics, API keys and the rate limit (auth), metrics and the access
log (metrics), and the Host check (guard). GET /health alone is open to callers without a key.
"""

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
UNLIMITED = frozenset({"/health", "/metrics"})  # a scraper's polls do not use up its key's rate


def _error_body(path: str, message: str) -> dict[str, str]:
    return deepl.error_body(message) if path.startswith("/v2/") else {"error": message}


def create_service(translator: Translator, limits: Limits | None = None, thresholds: Thresholds | None = None,
                   wait_ms: float = 5.0, access: Access | None = None,
                   access_log: logging.Logger | None = ACCESS_LOG, allow_origins: tuple[str, ...] = (),
                   allowed_hosts: Iterable[str] | None = None, glossaries: GlossaryStore | None = None) -> FastAPI:
    """The whole service around `translator`; `access` says who may call (default: anyone, no rate limit);
    `access_log` receives one INFO line per request (None: no access log); `allow_origins` are the web pages of
    other sites that may call it from a browser (create_app); `allowed_hosts` the Host headers it answers
    (guard.HostCheck, before the keys and the rate limit; None: any); `glossaries` those of DeepL's glossary
    endpoints (default: in memory)."""
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
