"""What the LibreTranslate- and DeepL-compatible endpoints share: their parameters, read from a JSON body, a form
(application/x-www-form-urlencoded) or the query string as their clients send them. Their texts, which may hold
several sentences and lines, are translated by `app.translate_texts`, split into sentences, and
marked-up documents by `translate_documents` (`Translator.translate_markup`).

The pair is the project's: German to English.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from nmt.errors import MarkupError
from nmt.markup import Aligned, splitter, translate_document
from nmt.serve.app import ApiError, check_text, json_object, queued_batcher, read_body, unless_gone
from nmt.serve.limits import Limits
from nmt.serve.metrics import count_sentences
from nmt.translator import Translation, Translator

SOURCE, TARGET = "de", "en"
NAMES = {SOURCE: "German", TARGET: "English"}
MAX_FIELDS = 1000  # form and query fields of one request
FORM = "application/x-www-form-urlencoded"


@dataclass
class Params:
    """A request's parameters: `json` holds a JSON body's object; `values` the query string and form fields
    (each name with all its values, the query string's first)."""

    json: dict[str, Any] | None = None
    values: dict[str, list[str]] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """A JSON field as sent, or the first value of a form or query field (None when absent)."""
        if self.json is not None:
            return self.json.get(name)
        found = self.values.get(name)
        return found[0] if found else None

    def all(self, name: str) -> Any:
        """A JSON field as sent, or every value of a form or query field."""
        return self.json.get(name) if self.json is not None else self.values.get(name)


def _fields(text: str, where: str) -> list[tuple[str, str]]:
    try:
        return urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError:
        raise ApiError(400, f"the {where} is not UTF-8 once percent-decoded") from None
    except ValueError:
        raise ApiError(413, f"the {where} has more than {MAX_FIELDS} fields") from None


async def read_params(request: Request, limits: Limits) -> Params:
    """The parameters of `request` as LibreTranslate reads them: a JSON body alone, else the query string and a
    form body together (an empty body with any content type is no form). Errors are ApiError (400, 413, 415)."""
    body = await read_body(request, limits)
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return Params(json=json_object(body))
    pairs = _fields(request.url.query, "query string")
    if kind == FORM:
        try:
            pairs += _fields(body.decode("utf-8"), "form")
        except UnicodeDecodeError:
            raise ApiError(400, "the form is not UTF-8") from None
    elif body.strip():
        raise ApiError(415, f"a body of type {kind or 'unknown'} cannot be read: send JSON (application/json), a "
                            f"form ({FORM}) or the query string")
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    return Params(values=values)


def confidence(translation: Translation | None) -> float | None:
    """An answer's `confidence` field: the translation's, to 4 places; None for no translation, or one of no tokens
    (a text without words, a document without text to translate)."""
    return round(translation.confidence, 4) if translation is not None and translation.tokens else None


async def translate_documents(request: Request, translator: Translator, limits: Limits, texts: Sequence[str],
                              format: str, ignore_tags: Sequence[str] = (),
                              mode: str = "nonewlines") -> list[Translation]:
    """Each text translated as a document in `format` (html or xml) with its markup kept, its blocks split into
    sentences in `mode`, on the batcher's worker (`Translator.translate_markup_scored`); a document that cannot be
    read is an ApiError 400 naming it. The limits of plain text hold: the documents' characters count whole, markup
    included, and their sentences together against max_sentences (413 before any is translated)."""
    check_text(list(texts), limits)
    count_sentences(request, texts)
    counted = [0]

    def count(sentences: list[str]) -> list[Aligned]:
        counted[0] += len(sentences)
        if counted[0] > limits.max_sentences:
            raise ApiError(413, f"{counted[0]} sentences or more in the documents; at most {limits.max_sentences} "
                                "per request")
        return [Aligned("")] * len(sentences)

    def work() -> list[Translation] | ApiError:
        split = splitter(mode, translator.languages[0])
        for number, text in enumerate(texts):  # every document is read and counted before any is translated
            try:
                translate_document(text, format, count, ignore_tags=ignore_tags, split=split)
            except MarkupError as err:  # the client's document, not the server, is at fault
                return ApiError(400, f"text {number}: {err}" if len(texts) > 1 else str(err))
            except ApiError as err:
                return err
        return [translator.translate_markup_scored(text, format, ignore_tags=ignore_tags, split_sentences=mode)
                for text in texts]

    result = await unless_gone(request, queued_batcher(request, limits).run(work))
    if isinstance(result, ApiError):
        raise result
    return result
