"""The FastAPI application: POST /translate, POST /attention, GET /health and the explorer page at GET /.

Every error is a 4xx or 5xx answer with one line of JSON, {"error": "..."}; no request can stop the server.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import torch
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from nmt.config import DecodeConfig, decode_with
from nmt.diagnostics import Thresholds
from nmt.engines.ctranslate2 import NO_GLOSSARY
from nmt.errors import MESSAGE, ConfigError, DataError, excerpt, short_repr
from nmt.glossary import Glossary, check_targets
from nmt.sentences import MODES, split_mode
from nmt.serve.batcher import Batcher
from nmt.serve.guard import HeaderLimit, OriginCheck, require_json
from nmt.serve.limits import HeaderLimits, Limits
from nmt.serve.metrics import count_sentences
from nmt.translator import Translation, Translator

T = TypeVar("T")
SETTINGS = ("beam", "n_best", "length_penalty")  # search settings a request may change, checked like the CLI flags
INTEGER_SETTINGS = ("beam", "n_best")


class ApiError(Exception):
    """An answer with a status code and a one-line message (and a Retry-After header when `retry_after`)."""

    def __init__(self, status: int, message: str, retry_after: int = 0) -> None:
        super().__init__(message)
        self.status, self.message = status, excerpt(" ".join(message.split()), MESSAGE)
        self.retry_after = retry_after


class QueueFull(ApiError):
    """Too many requests are waiting for the decoder (503 here; the compatible APIs answer 429)."""


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def _error(status: int, message: str, retry_after: int = 0) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after else None
    return JSONResponse({"error": excerpt(" ".join(str(message).split()), MESSAGE)}, status_code=status,
                        headers=headers)


async def read_body(request: Request, limits: Limits) -> bytes:
    """The request body, read up to the size limit."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise ApiError(413, f"request body of {excerpt(declared)} bytes exceeds this server's limit of "
                            f"{limits.max_body_bytes} bytes (what {limits.max_chars} characters take as JSON)")
    body = bytearray()
    async for chunk in request.stream():  # a client that hangs up here raises ClientDisconnect: see create_app
        body += chunk
        if len(body) > limits.max_body_bytes:
            raise ApiError(413, f"request body exceeds this server's limit of {limits.max_body_bytes} bytes (what "
                                f"{limits.max_chars} characters take as JSON)")
    return bytes(body)


async def read_json(request: Request, limits: Limits) -> dict[str, Any]:
    """The request body as a JSON object, read up to the size limit."""
    return json_object(await read_body(request, limits))


def json_object(body: bytes) -> dict[str, Any]:
    """A body that must be a JSON object, parsed; ApiError 400 otherwise."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ApiError(400, f"the body is not valid JSON ({type(err).__name__}: {str(err)[:120]})") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the body must be a JSON object, got {type(data).__name__}")
    return data


def check_fields(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError(400, f"unknown field {short_repr(unknown[0])}; allowed: {', '.join(allowed)}")
    if "src" not in body:
        raise ApiError(400, "missing field 'src'")


def settings(body: dict[str, Any], base: DecodeConfig, keys: tuple[str, ...], limits: Limits) -> DecodeConfig:
    """`base` with the request's settings applied, checked as nmt-translate checks its flags."""
    changes = {}
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        integer = key in INTEGER_SETTINGS
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            kind = "an integer" if integer else "a number"
            raise ApiError(400, f"{key} must be {kind}, got {json.dumps(value)[:40]}")
        changes[key] = value
    if changes.get("beam", 0) > limits.max_beam:
        raise ApiError(422, f"beam: got {changes['beam']}, this server allows at most {limits.max_beam} (--max-beam)")
    try:
        return decode_with(base, changes, label=lambda key: key)
    except ConfigError as err:
        raise ApiError(422, str(err)) from None


def check_text(lines: list[Any], limits: Limits) -> None:
    if not all(isinstance(line, str) for line in lines):
        raise ApiError(400, "src must hold strings only")
    for line in lines:
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "src holds a lone surrogate (\\ud800-\\udfff): not text") from None
    if len(lines) > limits.max_sentences:
        raise ApiError(413, f"{len(lines)} sentences; at most {limits.max_sentences} per request")
    chars = sum(len(line) for line in lines)
    if chars > limits.max_chars:
        raise ApiError(413, f"{chars} characters; at most {limits.max_chars} per request")


def queued_batcher(request: Request, limits: Limits) -> Batcher:
    """The application's batcher, or QueueFull when --max-queue requests are waiting already."""
    batcher: Batcher = request.app.state.batcher
    if batcher.queue.qsize() >= limits.max_queue:
        raise QueueFull(503, f"{limits.max_queue} requests are waiting already; try again shortly")
    return batcher


def note_truncated(request: Request, where: str, length: int, limit: int) -> None:
    """Record, for the answer's `warnings`, a sentence cut to the source-length limit."""
    if not hasattr(request.state, "warnings"):
        request.state.warnings = []
    request.state.warnings.append(f"{where}: {length} subwords, truncated to {limit}")


def answer_warnings(request: Request) -> dict[str, list[str]]:
    """The answer's `warnings` field: what was cut short (absent when nothing was)."""
    notes = getattr(request.state, "warnings", None)
    return {"warnings": list(notes)} if notes else {}


async def translate_texts(request: Request, translator: Translator, limits: Limits, texts: list[Any],
                          decode: DecodeConfig, split_sentences: str, glossary: Glossary | None = None,
                          constraints: list[Any] | None = None) -> list[list[Translation]]:
    """Each text's n-best list: checked against the limits, prepared, then searched in a batch."""
    check_text(texts, limits)
    if decode.sampling and (glossary is not None or constraints is not None):
        raise ApiError(422, "glossary and constraints need beam search; this server samples (--sampling)")
    try:
        prepared = translator.prepare(texts, split_sentences, glossary=glossary, constraints=constraints)
        for wanted in prepared.terms or ():  # refuse terms the vocabulary cannot write
            translator.encode_terms(wanted)
    except DataError as err:
        raise ApiError(400, str(err)) from None
    sentences = prepared.sentences
    check_text(sentences, limits)
    count_sentences(request, sentences)
    if not sentences:
        return [[] for _ in texts]
    limit = translator.with_decode(decode).decode.max_source_tokens
    return await unless_gone(request, queued_batcher(request, limits).translate(
        prepared, decode, lambda text, n: note_truncated(request, f"text {text + 1}", n, limit)))


def request_glossary(translator: Translator, glossary: Any, constraints: Any) -> Glossary | None:
    """A request's `glossary` as a Glossary, once it and `constraints` are well-formed and searchable."""
    if glossary is None and constraints is None:
        return None
    if not translator.engine.abilities.constraints:
        raise ApiError(422, NO_GLOSSARY)
    if glossary is not None and not isinstance(glossary, (dict, list)):
        raise ApiError(400, "glossary must be an object {source term: target term} or a list of [source, target] "
                            "pairs")
    if constraints is not None and not isinstance(constraints, list):
        raise ApiError(400, "constraints must be a list holding a list of target terms per line of src")
    try:
        if glossary is None:
            return None
        checked = Glossary.of(glossary)
        check_targets(checked, translator.encode_terms)
        return checked
    except DataError as err:
        raise ApiError(400, str(err)) from None


def split_setting(value: Any, name: str = "split_sentences") -> str:
    """A request's sentence-splitting mode (absent: on), or ApiError 400 naming the choices."""
    if value is None:
        return "on"
    try:
        return split_mode(value)
    except ConfigError:
        raise ApiError(400, f"{name} must be true, false or one of {', '.join(MODES)}, got "
                            f"{json.dumps(value)[:40]}") from None


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (the body has been read, so only a disconnect can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """The result of `work`, or ClientGone, cancelling the work, when the client disconnects first."""
    task, watcher = asyncio.ensure_future(work), asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()  # cancels the batcher's future: the worker skips it
        raise ClientGone
    try:
        return task.result()
    except torch.OutOfMemoryError:
        raise ApiError(503, "out of memory while decoding; send fewer or shorter sentences") from None
    except Exception as err:  # noqa: BLE001 - one line for the client; the server goes on
        raise ApiError(500, f"decoding failed: {type(err).__name__}: {str(err)[:200]}") from None


def _health(translator: Translator, limits: Limits) -> dict[str, Any]:
    """What GET /health tells anyone: the model by name and sha256, its settings and the limits; no file path,
    since /health is open to callers without a key."""
    members = translator.members
    name = translator.cfg.name if translator.cfg is not None else Path(members[0].path).name
    settings = translator.settings()
    settings["members"] = [{key: value for key, value in member.items() if key != "path"}
                           for member in settings["members"]]
    return {"status": "ok", "name": name, "sha256": [m.sha256 for m in members] if len(members) > 1
            else members[0].sha256, "arch": translator.cfg.model.arch if translator.cfg else None,
            "attention": translator.engine.abilities.attention, "settings": settings, "limits": asdict(limits)}


def create_app(translator: Translator, limits: Limits | None = None, thresholds: Thresholds | None = None,
               wait_ms: float = 5.0, on_batch: Callable[[int], None] | None = None,
               allow_origins: tuple[str, ...] = (), headers: HeaderLimits | None = None) -> FastAPI:
    """The service around `translator`, with a Batcher for the application's life. Pages of other origins are
    refused unless in `allow_origins`, which also get CORS headers."""
    limits, thresholds = limits or Limits(), thresholds or Thresholds()
    origin_check = OriginCheck(allow_origins)
    page = (resources.files("nmt.serve") / "static" / "index.html").read_text(encoding="utf-8")
    health = _health(translator, limits)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.batcher = Batcher(translator, wait_ms, on_batch=on_batch)
        yield
        await asyncio.to_thread(app.state.batcher.close)  # uvicorn has let the requests in flight finish

    app = FastAPI(title="nmt-serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.origin_check = origin_check
    if origin_check.allowed:
        app.add_middleware(CORSMiddleware, allow_origins=sorted(origin_check.allowed), allow_methods=["GET", "POST"],
                           allow_headers=["*"])
    app.add_middleware(HeaderLimit, limits=headers or HeaderLimits())  # added last: runs first
    json_post = [Depends(origin_check), Depends(require_json)]

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, err: ApiError) -> JSONResponse:
        return _error(err.status, err.message, err.retry_after)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, err: HTTPException) -> JSONResponse:
        return _error(err.status_code, str(err.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, err: RequestValidationError) -> JSONResponse:
        return _error(400, str(err))

    @app.exception_handler(ClientGone)
    @app.exception_handler(ClientDisconnect)  # hung up while sending the body: ordinary traffic, not a fault
    async def client_gone(_request: Request, _err: Exception) -> Response:
        return Response(status_code=499)  # nobody reads it

    @app.get("/", response_class=HTMLResponse)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/health")
    async def get_health() -> dict[str, Any]:
        return health

    @app.post("/translate", dependencies=json_post)
    async def translate(request: Request) -> dict[str, Any]:
        body = await read_json(request, limits)
        check_fields(body, ("src", "split_sentences", *SETTINGS, "glossary", "constraints"))
        lines = body["src"]
        if not isinstance(lines, list):
            raise ApiError(400, f"src must be a list of strings, got {type(lines).__name__}")
        decode = settings(body, translator.decode, SETTINGS, limits)
        mode = split_setting(body.get("split_sentences"))
        glossary = request_glossary(translator, body.get("glossary"), body.get("constraints"))
        results = await translate_texts(request, translator, limits, lines, decode, mode, glossary,
                                        body.get("constraints"))
        best = [found[0] if found else None for found in results]
        out: dict[str, Any] = {
            "translations": [t.text if t else "" for t in best],
            "scores": [round(t.score, 4) if t else None for t in best],
            "mean_log_probs": [round(t.mean_log_prob, 4) if t else None for t in best],
            "confidences": [round(t.confidence, 4) if t else None for t in best],
            "settings": {**{key: getattr(decode, key) for key in SETTINGS}, "split_sentences": mode}}
        if glossary is not None or body.get("constraints") is not None:  # terms each best translation lacks
            out["unmet"] = [t.unmet if t else 0 for t in best]
        if decode.n_best > 1:
            out["n_best"] = [[{"text": t.text, "score": round(t.score, 4), "mean_log_prob": round(t.mean_log_prob, 4),
                               "confidence": round(t.confidence, 4)} for t in found] for found in results]
        return out | answer_warnings(request)

    @app.post("/attention", dependencies=json_post)
    async def attention(request: Request) -> dict[str, Any]:
        body = await read_json(request, limits)
        check_fields(body, ("src", "beam", "length_penalty"))
        if not isinstance(body["src"], str):
            raise ApiError(400, f"src must be one sentence (a string), got {type(body['src']).__name__}")
        check_text([body["src"]], limits)
        count_sentences(request, [body["src"]])
        if not translator.engine.abilities.attention:
            raise ApiError(400, "an exported model gives no attention weights; serve a checkpoint or run folder "
                                "for /attention")
        decode = settings(body, replace(translator.decode, n_best=1), ("beam", "length_penalty"), limits)
        call = functools.partial(translator.with_decode(decode).attention, body["src"], thresholds)
        result = await unless_gone(request, queued_batcher(request, limits).run(call))
        return {**result, "thresholds": asdict(thresholds),
                "settings": {"beam": decode.beam, "length_penalty": decode.length_penalty}}

    return app
