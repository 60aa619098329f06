"""What a request must pass before its body is read: the size of its headers, where it comes from (its Origin) and,
on the JSON endpoints, its Content-Type.

The pieces stand apart so that each endpoint takes the ones that fit it: the native API takes all three, while the
LibreTranslate-compatible endpoints, whose clients post form data, take the origin check without the JSON rule. A
refusal raises starlette's HTTPException (the application answers it as one line of JSON); the header limit is an
ASGI middleware that answers 431 itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from nmt.errors import ConfigError
from nmt.serve.limits import HeaderLimits
from nmt.yamlsafe import short_repr

JSON = "application/json"


class HeaderLimit:
    """ASGI middleware: answer 431 to a request whose headers exceed `limits`, before any endpoint runs."""

    def __init__(self, app: ASGIApp, limits: HeaderLimits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            size = sum(len(name) + len(value) for name, value in headers)
            if len(headers) > self.limits.count or size > self.limits.size:
                message = (f"{len(headers)} header lines of {size} bytes; this server takes at most "
                           f"{self.limits.count} lines of {self.limits.size} bytes in all")
                await JSONResponse({"error": message}, status_code=431)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def origin_of(text: str) -> str:
    """`text` as a browser writes an Origin header (scheme://host[:port], lower case), or ConfigError."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username is not None:
        raise ConfigError(f"--allow-origin {short_repr(text)}: expected an origin such as https://example.org or "
                          "http://localhost:3000 (scheme, host and port only)")
    return f"{parts.scheme}://{parts.netloc.lower()}"


class OriginCheck:
    """A FastAPI dependency refusing (403) a request a browser sent from another site than the server's own page,
    unless its origin is one of `allowed`. A request without an Origin header (curl, a script) is not a browser's
    cross-site request and passes; so does the server's own page, whose origin is the address it was loaded from.
    """

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.allowed = frozenset(origin_of(origin) for origin in allowed)

    def __call__(self, request: Request) -> None:
        origin = request.headers.get("origin")
        if origin is None or origin.lower() in self.allowed:
            return
        own = f"{request.url.scheme}://{request.headers.get('host', '').lower()}"
        if origin.lower() != own:
            raise HTTPException(403, f"a request from the web page at {short_repr(origin)} is refused: this server "
                                     f"answers pages of its own origin ({short_repr(own)}) and those given to "
                                     "nmt-serve --allow-origin")


def require_json(request: Request) -> None:
    """A FastAPI dependency refusing (415) a body not declared as application/json. Browsers send text/plain and
    form bodies to another site without asking it first; a JSON body from another site needs the server's consent
    (CORS), which nmt-serve gives only to --allow-origin."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != JSON:
        got = short_repr(media) if media else "no Content-Type"
        raise HTTPException(415, f"the body must be JSON sent with Content-Type: {JSON}, got {got}")
