"""DeepL's API v2 (translate, languages, usage, glossaries), so the official clients work with
server_url="http://HOST:PORT".

Settings this server cannot honour are refused; hints it can do without are ignored. Each translation also
carries `confidence` (exp of the per-token mean log-probability), which DeepL's clients ignore. Errors are
{"message": "..."} with DeepL's statuses; there is no character quota (never 456).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from nmt.engines.ctranslate2 import NO_GLOSSARY
from nmt.errors import DataError, short_repr
from nmt.glossary import FORMATS, Glossary, check_targets
from nmt.serve.app import ApiError, QueueFull, answer_warnings, translate_texts
from nmt.serve.auth import IDENTITY, Access
from nmt.serve.compat import NAMES, SOURCE, TARGET, Params, confidence, read_params, translate_documents
from nmt.serve.glossaries import SHARED, GlossaryStore, Stored, TooMany
from nmt.serve.limits import Limits
from nmt.translator import Translator

TARGETS = {"EN": "English", "EN-GB": "English (British)", "EN-US": "English (American)"}
REFUSED = ("glossary_ids", "style_id", "custom_instructions", "translation_memory_id", "splitting_tags",
           "non_splitting_tags")
TAG_HANDLING = ("xml", "html")
GLOSSARY_PAIRS = [{"source_lang": SOURCE, "target_lang": TARGET}]
TSV = "text/tab-separated-values"
FORMALITIES = ("default", "prefer_less", "prefer_more")  # "prefer_": DeepL falls back to the default
STATUSES = (400, 403, 413, 429, 500, 503)
SPLIT_MODES = {"0": "off", "1": "on", "nonewlines": "nonewlines"}  # DeepL's split_sentences: nmt.sentences' modes


class DeepLError(Exception):
    """An answer in DeepL's shape, {"message": "..."}."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, " ".join(message.split())


def error_body(message: str) -> dict[str, str]:
    return {"message": message}


def _status(err: ApiError) -> int:
    if isinstance(err, QueueFull):
        return 429
    return err.status if err.status in STATUSES else 400 if err.status < 500 else 500


def _texts(params: Params) -> list[str]:
    texts = params.all("text")
    if texts is None or texts == [] or texts == "":
        raise DeepLError(400, "Parameter 'text' not specified.")
    if isinstance(texts, str) and params.json is not None:
        raise DeepLError(400, "Parameter 'text' must be an array of strings in a JSON body.")
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise DeepLError(400, "Parameter 'text' must hold strings only.")
    return texts


def _check(params: Params) -> None:
    target = params.get("target_lang")
    if not target:
        raise DeepLError(400, "Parameter 'target_lang' not specified.")
    if not isinstance(target, str) or target.upper() not in TARGETS:
        raise DeepLError(400, f"Value for 'target_lang' not supported: {short_repr(target)}; this server "
                              f"translates into {', '.join(TARGETS)}.")
    source = params.get("source_lang")
    if source and (not isinstance(source, str) or source.upper() != SOURCE.upper()):
        raise DeepLError(400, f"Value for 'source_lang' not supported: {short_repr(source)}; this server "
                              f"translates from {SOURCE.upper()}.")
    for name in REFUSED:
        if params.get(name) not in (None, ""):
            raise DeepLError(400, f"Parameter '{name}' is not supported by this server.")
    formality = params.get("formality")
    if formality not in (None, "", *FORMALITIES):
        raise DeepLError(400, f"'formality' {short_repr(formality)} is not supported for the target language; "
                              f"use one of {', '.join(FORMALITIES)}.")


def _tags(params: Params) -> tuple[str | None, list[str]]:
    """`tag_handling` (None: plain text) and the `ignore_tags` (a comma-separated string, or a list in JSON)."""
    handling = params.get("tag_handling")
    if handling in (None, ""):
        handling = None
    elif handling not in TAG_HANDLING:
        raise DeepLError(400, f"Value for 'tag_handling' not supported: {short_repr(handling)}; use xml or html.")
    ignore = params.all("ignore_tags") or []
    names = ignore.split(",") if isinstance(ignore, str) else ignore
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise DeepLError(400, "Parameter 'ignore_tags' must be a comma-separated string or a list of strings.")
    names = [part.strip() for name in names for part in name.split(",") if part.strip()]
    if names and handling is None:
        raise DeepLError(400, "Parameter 'ignore_tags' needs 'tag_handling' (xml or html).")
    return handling, names


def _split_mode(value: Any) -> str:
    """DeepL's `split_sentences` ("0", "1" or "nonewlines"; absent: "1") as a mode of `nmt.sentences`."""
    if value in (None, ""):
        return "on"
    key = str(value) if isinstance(value, int) and not isinstance(value, bool) else value  # JSON may send 0 or 1
    if not isinstance(key, str) or key not in SPLIT_MODES:
        raise DeepLError(400, f"Value for 'split_sentences' not supported: {short_repr(value)}; use "
                              f"{', '.join(SPLIT_MODES)}.")
    return SPLIT_MODES[key]


def _text(params: Params, name: str) -> str:
    value = params.get(name)
    if value in (None, ""):
        raise DeepLError(400, f"Parameter '{name}' not specified.")
    if not isinstance(value, str):
        raise DeepLError(400, f"Parameter '{name}' must be a string.")
    return value


def add_routes(app: FastAPI, translator: Translator, limits: Limits, characters: Callable[[], int],
               access: Access | None = None, glossaries: GlossaryStore | None = None) -> None:
    """DeepL's endpoints under /v2/, sharing /translate's batcher and limits; `characters` feeds /v2/usage."""
    access, store = access or Access(), glossaries or GlossaryStore()

    def owner(request: Request) -> bytes:
        """Whose glossaries a request sees: its key's, or the shared set without keys."""
        if access.keys is None:
            return SHARED
        identity = request.scope.get(IDENTITY)
        if identity is None:  # not through the Guard: nobody's glossaries
            raise DeepLError(403, "this server needs an API key")
        return identity

    def stored(request: Request, glossary_id: str) -> Stored:
        found = store.get(owner(request), glossary_id)
        if found is None:
            raise DeepLError(404, "Glossary not found.")
        return found

    def can_use_glossaries() -> None:
        if not translator.engine.abilities.constraints:
            raise DeepLError(400, NO_GLOSSARY)

    @app.exception_handler(DeepLError)
    async def deepl_error(_request: Request, err: DeepLError) -> JSONResponse:
        return JSONResponse(error_body(err.message), status_code=err.status)

    async def params_of(request: Request) -> Params:
        try:
            return await read_params(request, limits)
        except ApiError as err:
            raise DeepLError(_status(err), err.message) from None

    @app.post("/v2/translate", dependencies=[Depends(app.state.origin_check)])  # forms need no preflight
    async def translate(request: Request) -> dict[str, Any]:
        params = await params_of(request)
        texts = _texts(params)
        _check(params)
        handling, ignore_tags = _tags(params)
        mode = _split_mode(params.get("split_sentences"))
        if handling is not None:
            if params.get("glossary_id") not in (None, ""):
                raise DeepLError(400, "Parameter 'glossary_id' cannot be combined with 'tag_handling' here.")
            if params.get("split_sentences") in (None, ""):
                mode = "nonewlines"  # as DeepL splits tagged text
            try:
                outputs = await translate_documents(request, translator, limits, texts, handling, ignore_tags, mode)
            except ApiError as err:
                raise DeepLError(_status(err), err.message) from None
            return {"translations": [{"detected_source_language": SOURCE.upper(), "text": output.text,
                                      "billed_characters": len(text), "confidence": confidence(output)}
                                     for text, output in zip(texts, outputs)]} | answer_warnings(request)
        glossary = None
        if params.get("glossary_id") not in (None, ""):
            can_use_glossaries()
            if not params.get("source_lang"):
                raise DeepLError(400, "Parameter 'source_lang' is required when a glossary is used.")
            glossary = store.glossary(stored(request, _text(params, "glossary_id")))
        try:
            results = await translate_texts(request, translator, limits, texts, translator.decode, mode,
                                            glossary)
        except ApiError as err:
            raise DeepLError(_status(err), err.message) from None
        return {"translations": [
            {"detected_source_language": SOURCE.upper(), "text": found[0].text if found else "",
             "billed_characters": len(text), "confidence": confidence(found[0] if found else None)}
            for text, found in zip(texts, results)]} | answer_warnings(request)

    @app.get("/v2/languages")
    async def languages(request: Request) -> list[dict[str, Any]]:
        kind = (await params_of(request)).get("type") or "source"
        if kind == "source":
            return [{"language": SOURCE.upper(), "name": NAMES[SOURCE]}]
        if kind == "target":
            return [{"language": code, "name": name, "supports_formality": False}
                    for code, name in TARGETS.items() if code != TARGET.upper()]
        raise DeepLError(400, f"Value for 'type' not supported: {short_repr(kind)}; use source or target.")

    @app.get("/v2/glossary-language-pairs")
    async def glossary_pairs(request: Request) -> dict[str, Any]:
        await params_of(request)
        return {"supported_languages": GLOSSARY_PAIRS}

    @app.post("/v2/glossaries", dependencies=[Depends(app.state.origin_check)])
    async def create_glossary(request: Request) -> JSONResponse:
        params = await params_of(request)
        can_use_glossaries()
        name, source, target = _text(params, "name"), _text(params, "source_lang"), _text(params, "target_lang")
        if (source.lower(), target.lower()) != (SOURCE, TARGET):
            raise DeepLError(400, f"Unsupported glossary source and target language pair: {short_repr(source)} to "
                                  f"{short_repr(target)}; this server has {SOURCE} to {TARGET}.")
        entries, kind = _text(params, "entries"), params.get("entries_format") or "tsv"
        if kind not in FORMATS:
            raise DeepLError(400, f"Value for 'entries_format' not supported: {short_repr(kind)}; use tsv or csv.")
        try:
            glossary = Glossary.parse(entries, kind, "entries", (SOURCE, TARGET))
            if not len(glossary):
                raise DataError("entries: no entry")
            check_targets(glossary, translator.encode_terms, "entries")
            info = store.create(owner(request), name, SOURCE, TARGET, glossary)
        except DataError as err:
            raise DeepLError(400, f"Invalid glossary: {err}") from None
        except TooMany as err:
            raise DeepLError(400, str(err)) from None
        return JSONResponse(asdict(info), status_code=201)

    @app.get("/v2/glossaries")
    async def list_glossaries(request: Request) -> dict[str, Any]:
        await params_of(request)
        return {"glossaries": [asdict(info) for info in store.list(owner(request))]}

    @app.get("/v2/glossaries/{glossary_id}")
    async def get_glossary(request: Request, glossary_id: str) -> dict[str, Any]:
        await params_of(request)
        return asdict(stored(request, glossary_id).info)

    @app.get("/v2/glossaries/{glossary_id}/entries")
    async def glossary_entries(request: Request, glossary_id: str) -> Response:
        await params_of(request)
        accept = request.headers.get("accept", "*/*")
        if not any(kind in accept for kind in (TSV, "*/*", "text/*")):
            raise DeepLError(415, f"Glossary entries come as {TSV} only.")
        return Response(stored(request, glossary_id).entries, media_type=TSV)

    @app.delete("/v2/glossaries/{glossary_id}", dependencies=[Depends(app.state.origin_check)])
    async def delete_glossary(request: Request, glossary_id: str) -> Response:
        await params_of(request)
        if not store.delete(owner(request), glossary_id):
            raise DeepLError(404, "Glossary not found.")
        return Response(status_code=204)

    @app.get("/v2/usage")
    async def usage(request: Request) -> dict[str, int]:
        await params_of(request)
        return {"character_count": characters()}

