"""LibreTranslate's API under /libretranslate/, answered as its own server does, so its clients work there.

Answers also carry `confidence` per text, which its clients ignore; errors are {"error": "..."} with
LibreTranslate's statuses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request

from nmt.errors import short_repr
from nmt.serve.app import ApiError, QueueFull, answer_warnings, settings, translate_texts
from nmt.serve.auth import Access, Denied, client_address, request_key
from nmt.serve.compat import NAMES, SOURCE, TARGET, Params, confidence, read_params, translate_documents
from nmt.serve.limits import Limits
from nmt.translator import Translator

PREFIX = "/libretranslate"
AUTO = "auto"
DETECTED = {"confidence": 0.0, "language": SOURCE}  # no detection is made: `auto` is the one source, German
STATUSES = (400, 403, 429, 500)


def _status(err: ApiError) -> int:
    if isinstance(err, QueueFull):
        return 429
    return err.status if err.status in STATUSES else 400 if err.status < 500 else 500


def _texts(q: Any) -> list[str]:
    if not q:
        raise ApiError(400, "Invalid request: missing q parameter")
    texts = q if isinstance(q, list) else [q]
    if not all(isinstance(text, str) for text in texts):
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    return texts


def _alternatives(value: Any, limits: Limits) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number")
    try:
        number = max(0, int(value))
    except ValueError:
        raise ApiError(400, "Invalid request: alternatives parameter is not a number") from None
    if number + 1 > limits.max_beam:
        raise ApiError(400, f"Invalid request: alternatives parameter must be <= {limits.max_beam - 1} "
                            "(the largest beam, --max-beam, less one)")
    return number


def _languages(params: Params) -> str:
    """Check the language pair; the text format (text or html)."""
    source, target = params.get("source"), params.get("target")
    for name, value in (("source", source), ("target", target)):
        if not value:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    if source not in (SOURCE, AUTO):
        raise ApiError(400, f"{short_repr(source)} is not supported: this server translates {SOURCE} (or {AUTO})"
                            f" to {TARGET}")
    if target != TARGET:
        raise ApiError(400, f"{short_repr(target)} is not supported: this server translates {SOURCE} to {TARGET}")
    text_format = params.get("format") or "text"
    if text_format not in ("text", "html"):
        raise ApiError(400, f"{short_repr(text_format)} format is not supported (format=text or html)")
    return text_format


def add_routes(app: FastAPI, translator: Translator, limits: Limits, access: Access) -> None:
    """LibreTranslate's endpoints under /libretranslate/, through the same batcher and limits as /translate."""
    async def checked(request: Request, answer: Callable[[Params], Awaitable[Any]]) -> Any:
        """`answer(params)` once the key (api_key, or a Bearer header) is known, in LibreTranslate's statuses."""
        try:
            params: Params | None = await read_params(request, limits)
        except ApiError as err:
            params, unreadable = None, err
        field = params.all("api_key") if params is not None else None  # "" from clients that have none
        try:
            access.check(request_key(request.scope["headers"], field), client_address(request.scope))
        except Denied as denied:
            raise ApiError(denied.status, denied.message, denied.retry_after) from None
        try:
            if params is None:
                raise unreadable
            return await answer(params)
        except ApiError as err:
            raise ApiError(_status(err), err.message) from None

    async def translation(params: Params, request: Request) -> dict[str, Any]:
        texts = _texts(params.get("q"))
        html = _languages(params) == "html"
        alternatives = _alternatives(params.get("alternatives"), limits)
        single = not isinstance(params.get("q"), list)
        if html and alternatives:
            raise ApiError(400, "Invalid request: alternatives are not available with format=html")
        if html:
            documents = await translate_documents(request, translator, limits, texts, "html")
            best, scores = [doc.text for doc in documents], [confidence(doc) for doc in documents]
            return ({"translatedText": best[0] if single else best, "confidence": scores[0] if single else scores}
                    | _detected(params, single, len(texts)) | answer_warnings(request))
        decode = translator.decode
        if alternatives:
            wanted = {"n_best": alternatives + 1, "beam": max(decode.beam, alternatives + 1)}
            decode = settings(wanted, decode, ("beam", "n_best"), limits)
        results = await translate_texts(request, translator, limits, texts, decode, "on")
        best = [found[0].text if found else "" for found in results]
        others = [_unique([t.text for t in found[1:]], main) for found, main in zip(results, best)]
        scores = [confidence(found[0] if found else None) for found in results]
        out: dict[str, Any] = {"translatedText": best[0] if single else best,
                               "confidence": scores[0] if single else scores}
        if alternatives:
            out["alternatives"] = others[0] if single else others
        return out | _detected(params, single, len(texts)) | answer_warnings(request)

    browser_post = [Depends(app.state.origin_check)]  # forms need no CORS preflight: check the Origin

    @app.post(PREFIX + "/translate", dependencies=browser_post)
    async def translate(request: Request) -> Any:
        return await checked(request, lambda params: translation(params, request))

    @app.post(PREFIX + "/detect", dependencies=browser_post)
    async def detect(request: Request) -> Any:
        async def answer(params: Params) -> list[dict[str, Any]]:
            q = params.get("q")
            if not q or not isinstance(q, str):
                raise ApiError(400, "Invalid request: missing q parameter (one string)")
            return [dict(DETECTED)]

        return await checked(request, answer)

    @app.get(PREFIX + "/languages")
    async def languages(request: Request) -> Any:
        async def answer(_params: Params) -> list[dict[str, Any]]:
            return [{"code": SOURCE, "name": NAMES[SOURCE], "targets": [TARGET]},
                    {"code": TARGET, "name": NAMES[TARGET], "targets": []}]

        return await checked(request, answer)

    @app.get(PREFIX + "/frontend/settings")
    async def frontend_settings(request: Request) -> Any:
        async def answer(_params: Params) -> dict[str, Any]:
            keyed = access.keys is not None
            return {"charLimit": limits.max_chars, "frontendTimeout": 500, "apiKeys": keyed, "keyRequired": keyed,
                    "suggestions": False, "filesTranslation": False, "supportedFilesFormat": [],
                    "language": {"source": {"code": SOURCE, "name": NAMES[SOURCE]},
                                 "target": {"code": TARGET, "name": NAMES[TARGET]}}}

        return await checked(request, answer)



def _detected(params: Params, single: bool, count: int) -> dict[str, Any]:
    """The detectedLanguage field of an answer to source=auto (none otherwise)."""
    if params.get("source") != AUTO:
        return {}
    return {"detectedLanguage": dict(DETECTED) if single else [dict(DETECTED) for _ in range(count)]}


def _unique(texts: list[str], main: str) -> list[str]:
    """`texts` in order without repeats, without `main` and without blanks (as LibreTranslate lists them)."""
    seen = {main, ""}
    return [text for text in texts if not (text in seen or seen.add(text))]
