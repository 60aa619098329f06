"""API keys and the per-key request rate of nmt-serve.

A key file holds one key a line (blank lines and lines starting with `#` are skipped). Keys are kept only as
SHA-256 digests and compared in constant time; no message, log line or metric ever holds a key, and a bad line
of the file is named by its number alone. `Guard` refuses requests before the application sees them, where the
key travels in a header; the LibreTranslate endpoints, whose key may be in the body, call `Access.check`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from nmt.errors import ConfigError

MIN_KEY_CHARS = 16  # shorter keys can be guessed
MAX_KEY_FILE_BYTES = 1 << 20
SCHEMES = ("bearer", "deepl-auth-key")  # Authorization: Bearer KEY (any endpoint), DeepL-Auth-Key KEY (DeepL's)
MAX_BUCKETS = 4096  # rate buckets kept before full (idle) ones are dropped


class Denied(Exception):
    """A request refused for its key (403) or its rate (429, with the seconds to wait)."""

    def __init__(self, status: int, message: str, retry_after: int = 0) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def read_keys(path: Path) -> frozenset[bytes]:
    """The digests of the keys in `path`; ConfigError (naming the file and line, never a key) when it is unusable."""
    where = f"--api-keys {path}"
    if not path.is_file():
        raise ConfigError(f"{where}: {'no such file' if not path.exists() else 'not a regular file'}")
    if path.stat().st_size > MAX_KEY_FILE_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_KEY_FILE_BYTES:,} bytes; one key a line is expected")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{where}: cannot be read ({err.strerror or type(err).__name__})") from None
    try:
        text = raw[:MAX_KEY_FILE_BYTES].decode("ascii")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ConfigError(f"{where}, line {line}: not ASCII (a key is printable ASCII without spaces)") from None
    digests = set()
    for number, line in enumerate(text.splitlines(), 1):
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        if not all("!" <= char <= "~" for char in key):
            raise ConfigError(f"{where}, line {number}: a key is printable ASCII without spaces "
                              "(the line is not shown: it may hold a key)")
        if len(key) < MIN_KEY_CHARS:
            raise ConfigError(f"{where}, line {number}: a key needs at least {MIN_KEY_CHARS} characters "
                              f"(e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')")
        digests.add(_digest(key))
    if not digests:
        raise ConfigError(f"{where}: holds no key (one key a line)")
    return frozenset(digests)


class KeyRing:
    """The keys of a key file, re-read by `reload` (nmt-serve calls it on SIGHUP)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._digests = read_keys(self.path)

    def __len__(self) -> int:
        return len(self._digests)

    def reload(self) -> int:
        """Read the file again; on a ConfigError the keys in use stay. Returns the number of keys."""
        self._digests = read_keys(self.path)
        return len(self._digests)

    def identify(self, key: str) -> bytes | None:
        """The digest that stands for `key`, or None for an unknown key; the time taken does not depend on which
        key, if any, matches (every digest is compared, each in constant time)."""
        digest, found = _digest(key), False
        for known in self._digests:
            found |= hmac.compare_digest(known, digest)
        return digest if found else None


class RateLimit:
    """A token bucket per caller: `per_minute` requests in a burst, refilled evenly over the minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity, self.rate, self.clock = float(per_minute), per_minute / 60.0, clock
        self.buckets: dict[Hashable, tuple[float, float]] = {}  # caller -> (tokens, when)

    def wait(self, caller: Hashable) -> float:
        """0 and one token taken when `caller` may go on, else the seconds until a token is there."""
        now = self.clock()
        tokens, then = self.buckets.get(caller, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self.buckets[caller] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self.buckets) >= MAX_BUCKETS and caller not in self.buckets:
            self._drop_full(now)
        self.buckets[caller] = (tokens - 1.0, now)
        return 0.0

    def _drop_full(self, now: float) -> None:
        self.buckets = {caller: (tokens, then) for caller, (tokens, then) in self.buckets.items()
                        if tokens + (now - then) * self.rate < self.capacity}


class Access:
    """Who may call: any caller without a KeyRing, else the holders of its keys; with a RateLimit, per key (or
    per client address when there are no keys)."""

    def __init__(self, keys: KeyRing | None = None, rate: RateLimit | None = None) -> None:
        self.keys, self.rate = keys, rate

    def check(self, key: str | None, client: str, limited: bool = True) -> None:
        """Denied unless `key` opens the server (and, when `limited`, the caller is within its rate)."""
        caller: Hashable = client
        if self.keys is not None:
            if not key:
                raise Denied(403, "this server needs an API key: api_key (LibreTranslate), the header "
                                  "Authorization: DeepL-Auth-Key KEY (DeepL) or Authorization: Bearer KEY (any)")
            identity = self.keys.identify(key)
            if identity is None:
                raise Denied(403, "invalid API key")
            caller = identity
        if limited and self.rate is not None:
            wait = self.rate.wait(caller)
            if wait > 0:
                raise Denied(429, f"too many requests: more than {self.rate.capacity:.0f} a minute; try again in "
                                  f"{math.ceil(wait)} s", retry_after=math.ceil(wait))


def header_key(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer KEY` or `Authorization: DeepL-Auth-Key KEY` header."""
    scheme, _, key = (authorization or "").strip().partition(" ")
    return (key.strip() or None) if scheme.lower() in SCHEMES else None


class Guard:
    """ASGI middleware: refuses a request without a valid header key (403) or over its rate (429) before the
    application sees it. Paths in `open_paths` pass; those under `own_prefix` check their key themselves;
    `unlimited` paths are not rate limited. `error_body(path, message)` gives each API its error shape."""

    def __init__(self, app: Any, access: Access, error_body: Callable[[str, str], dict[str, Any]],
                 open_paths: frozenset[str] = frozenset(), own_prefix: str = "\0",
                 unlimited: frozenset[str] = frozenset()) -> None:
        self.app, self.access, self.error_body = app, access, error_body
        self.open_paths, self.own_prefix, self.unlimited = open_paths, own_prefix, unlimited

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        path = scope.get("path", "")
        if (scope["type"] != "http" or path in self.open_paths or path.startswith(self.own_prefix)
                or scope["method"] == "OPTIONS"):  # a CORS preflight never carries a key
            await self.app(scope, receive, send)
            return
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        key = header_key(headers.get(b"authorization", b"").decode("latin-1"))
        try:
            self.access.check(key, client_address(scope), limited=path not in self.unlimited)
        except Denied as denied:
            await refuse(send, denied, self.error_body(path, denied.message))
            return
        await self.app(scope, receive, send)


def client_address(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


async def refuse(send: Callable, denied: Denied, body: dict[str, Any]) -> None:
    """Answer `denied` with `body` as JSON, without calling the application."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if denied.retry_after:
        headers.append((b"retry-after", str(denied.retry_after).encode()))
    await send({"type": "http.response.start", "status": denied.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
