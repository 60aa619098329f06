"""What the LibreTranslate- and DeepL-compatible endpoints share: parameters (JSON, form or query string) and
document translation."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from nmt.errors import MarkupError
from nmt.markup import Aligned, splitter, translate_document
from nmt.serve.app import ApiError, check_text, json_object, note_truncated, queued_batcher, read_body, unless_gone
from nmt.serve.limits import Limits
from nmt.serve.metrics import count_sentences
from nmt.translator import Translation, Translator

SOURCE, TARGET = "de", "en"
NAMES = {SOURCE: "German", TARGET: "English"}
MAX_FIELDS = 1000  # per request
FORM = "application/x-www-form-urlencoded"


@dataclass
class Params:
    """A request's JSON body, or its query string and form fields (all values per name, query's first)."""

    json: dict[str, Any] | None = None
    values: dict[str, list[str]] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """A JSON field, or a form or query field's first value (None when absent)."""
        if self.json is not None:
            return self.json.get(name)
        found = self.values.get(name)
        return found[0] if found else None

    def all(self, name: str) -> Any:
        """A JSON field, or a form or query field's values."""
        return self.json.get(name) if self.json is not None else self.values.get(name)


def _fields(text: str, where: str) -> list[tuple[str, str]]:
    try:
        return urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError:
        raise ApiError(400, f"the {where} is not UTF-8 once percent-decoded") from None
    except ValueError:
        raise ApiError(413, f"the {where} has more than {MAX_FIELDS} fields") from None


async def read_params(request: Request, limits: Limits) -> Params:
    """`request`'s parameters as LibreTranslate reads them: a JSON body, else query string and form."""
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
    """An answer's `confidence` field (None without tokens)."""
    return round(translation.confidence, 4) if translation is not None and translation.tokens else None


async def translate_documents(request: Request, translator: Translator, limits: Limits, texts: Sequence[str],
                              format: str, ignore_tags: Sequence[str] = (),
                              mode: str = "nonewlines") -> list[Translation]:
    """Each text translated as an html or xml document on the batcher's worker; unreadable documents are 400,
    and text limits hold (markup counts; 413 before anything is translated)."""
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
        for number, text in enumerate(texts):  # read and count all before translating
            try:
                translate_document(text, format, count, ignore_tags=ignore_tags, split=split)
            except MarkupError as err:
                return ApiError(400, f"text {number}: {err}" if len(texts) > 1 else str(err))
            except ApiError as err:
                return err
        limit = translator.decode.max_source_tokens
        return [translator.translate_markup_scored(
            text, format, ignore_tags=ignore_tags, split_sentences=mode,
            warn=lambda j, n, i=i: note_truncated(request, f"text {i + 1} sentence {j + 1}", n, limit))
            for i, text in enumerate(texts)]

    result = await unless_gone(request, queued_batcher(request, limits).run(work))
    if isinstance(result, ApiError):
        raise result
    return result
