"""What the LibreTranslate- and DeepL-compatible endpoints share: their parameters, read from a JSON body, a form
(application/x-www-form-urlencoded) or the query string as their clients send them, and texts that may hold
several lines, each translated as nmt-translate translates a line of a file.

The pair is the project's: German to English.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from nmt.config import DecodeConfig
from nmt.decode import Hypothesis
from nmt.glossary import Glossary, line_terms
from nmt.serve.app import ApiError, decode_lines, json_object, read_body
from nmt.serve.limits import Limits
from nmt.translator import Translator

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


def lines_of(text: str) -> list[str]:
    """The lines of `text` (\\n, \\r\\n or \\r end a line, as when nmt-translate reads a file)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


async def translate_texts(request: Request, translator: Translator, limits: Limits, texts: Sequence[str],
                          decode: DecodeConfig, glossary: Glossary | None = None) -> list[list[list[Hypothesis]]]:
    """For each text, the n-best list of each of its lines, decoded in a batch with other requests; with a
    glossary, each line's translation holds the target terms its source terms call for."""
    per_text = [lines_of(text) for text in texts]
    lines = [line for text_lines in per_text for line in text_lines]
    terms = None if glossary is None else line_terms(lines, glossary)
    results = await decode_lines(request, limits, lines, decode, terms)
    out, start = [], 0
    for lines in per_text:
        out.append(results[start:start + len(lines)])
        start += len(lines)
    return out


def joined(translator: Translator, text: list[list[Hypothesis]], rank: int = 0) -> str:
    """A text's translation: each line's hypothesis of `rank` (its best where it has fewer), one line each."""
    return "\n".join(translator.detokenize(hyps[min(rank, len(hyps) - 1)]) if hyps else "" for hyps in text)
