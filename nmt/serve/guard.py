"""Checks before a request's body is read: header size, Host, Origin and, on JSON endpoints, Content-Type.

Each endpoint takes the checks that fit it (LibreTranslate's form clients skip the JSON rule).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from nmt.errors import ConfigError, short_repr
from nmt.serve.limits import HeaderLimits

JSON = "application/json"
HOST = re.compile(r"(?P<name>[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?|\[(?P<ipv6>[0-9a-f:.]+)\])(:(?P<port>[0-9]{1,5}))?",
                  re.IGNORECASE)
DEFAULT_PORTS = {"http": 80, "https": 443}


class HeaderLimit:
    """ASGI middleware answering 431 to headers beyond `limits`."""

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


def _host(text: str) -> tuple[str, int | None] | None:
    """A Host header's (lower-case name, port or None), or None if it is no host."""
    found = HOST.fullmatch(text)
    if found is None:
        return None
    name, port = found["name"].lower(), int(found["port"]) if found["port"] else None
    if found["ipv6"] is not None:
        try:
            name = f"[{ipaddress.IPv6Address(found['ipv6']).compressed}]"
        except ValueError:
            return None
    return name, port


def allowed_host(text: str) -> str:
    """`text` as an --allowed-hosts entry (name or name:port), or ConfigError."""
    if _host(text.strip()) is None:
        raise ConfigError(f"--allowed-hosts {short_repr(text)}: expected a host name or address as a browser sends "
                          "it in the Host header, with or without a port (translate.example.org, 192.168.1.5:8000, "
                          "[fe80::1])")
    return text.strip().lower()


class HostCheck:
    """ASGI middleware answering 400 to a Host not in `allowed`: the defence against DNS rebinding, which the
    Origin check misses. An entry without a port matches any port."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app, self.shown = app, tuple(allowed_host(entry) for entry in allowed)
        self.allowed = frozenset(_host(entry) for entry in self.shown)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            text = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"host"), "")
            if not self.answers(text, scope["scheme"]):
                message = (f"the Host header {short_repr(text) if text else '(none)'} is not a name of this server "
                           f"({', '.join(self.shown)}); serving another name (a proxy's, a LAN address) needs "
                           "nmt-serve --allowed-hosts")
                await JSONResponse({"error": message}, status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def answers(self, text: str, scheme: str) -> bool:
        host = _host(text)
        if host is None:
            return False
        name, port = host
        return (name, None) in self.allowed or (name, port or DEFAULT_PORTS.get(scheme)) in self.allowed


def origin_of(text: str) -> str:
    """`text` as an Origin header (scheme://host[:port], lower case), or ConfigError."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username is not None:
        raise ConfigError(f"--allow-origin {short_repr(text)}: expected an origin such as https://example.org or "
                          "http://localhost:3000 (scheme, host and port only)")
    return f"{parts.scheme}://{parts.netloc.lower()}"


class OriginCheck:
    """A FastAPI dependency refusing (403) a browser's request from another origin than the server's own or
    `allowed`; requests without an Origin (curl, scripts) pass."""

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
    """A FastAPI dependency refusing (415) non-JSON bodies: a cross-site JSON body needs CORS consent, while
    browsers send text/plain and forms without asking."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != JSON:
        got = short_repr(media) if media else "no Content-Type"
        raise HTTPException(415, f"the body must be JSON sent with Content-Type: {JSON}, got {got}")
