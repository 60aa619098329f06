"""API keys and the per-key request rate of nmt-serve.

A key file holds one key a line (blank lines and lines starting with `#` are skipped). Keys are kept only as
SHA-256 digests and compared in constant time; no message, log line or metric ever holds a key, and a bad line
of the file is named by its number alone. `Guard` refuses requests before the application sees them, where the
key travels in a header; the LibreTranslate endpoints, whose key may be in the body, call `Access.check`.

Wrong keys are rate limited per client address: after WRONG_KEYS_PER_MINUTE of them an address waits (429)
whatever key it sends, so that guessing is slow; a right key takes nothing from that allowance, and other
addresses never notice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

from nmt.errors import ConfigError, FileError
from nmt.fileio import read_regular

MIN_KEY_CHARS = 16  # shorter keys can be guessed
MAX_KEY_FILE_BYTES = 1 << 20
SCHEMES = ("bearer", "deepl-auth-key")  # Authorization: Bearer KEY (any endpoint), DeepL-Auth-Key KEY (DeepL's)
MAX_BUCKETS = 4096  # rate buckets kept; a new caller beyond them pushes out the one seen longest ago
WRONG_KEYS_PER_MINUTE = 10  # wrong keys an address may send in a burst, refilled evenly over the minute


IDENTITY = "nmt.identity"  # the ASGI scope's key for the digest of the request's key, decided once by Guard


class Denied(Exception):
    """A request refused for its credentials (400 for two, 403 for a wrong or missing key) or its rate (429, with
    the seconds to wait)."""

    def __init__(self, status: int, message: str, retry_after: int = 0) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def read_keys(path: Path) -> frozenset[bytes]:
    """The digests of the keys in `path`; ConfigError (naming the file and line, never a key) when it is unusable."""
    where = f"--api-keys {path}"
    try:
        if path.stat().st_size > MAX_KEY_FILE_BYTES:
            raise ConfigError(f"{where}: larger than {MAX_KEY_FILE_BYTES:,} bytes; one key a line is expected")
        raw = read_regular(path, "--api-keys")  # replaced since the stat: still no FIFO or device is read
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except FileError as err:
        raise ConfigError(str(err)) from None
    except OSError as err:  # no permission, a name too long, a folder that cannot be searched, ...
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
    """A token bucket per caller: `per_minute` requests in a burst, refilled evenly over the minute. At most
    `size` buckets are kept, the callers seen most recently (an LRU): constant time and memory per request."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic, size: int = MAX_BUCKETS) -> None:
        self.capacity, self.rate, self.clock, self.size = float(per_minute), per_minute / 60.0, clock, size
        self.buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # caller -> (tokens, when)

    def wait(self, caller: Hashable, take: bool = True) -> float:
        """The seconds until `caller` has a token, 0 when it has one now (and then, if `take`, one is taken)."""
        now = self.clock()
        known = self.buckets.get(caller)
        if known is None and not take:
            return 0.0  # a full bucket: nothing to remember
        tokens, then = known or (self.capacity, now)
        tokens = min(self.capacity, tokens + (now - then) * self.rate)
        wait = (1.0 - tokens) / self.rate if tokens < 1.0 else 0.0
        self.buckets[caller] = (tokens - 1.0 if take and not wait else tokens, now)
        self.buckets.move_to_end(caller)
        if len(self.buckets) > self.size:
            self.buckets.popitem(last=False)
        return wait


class Access:
    """Who may call: any caller without a KeyRing, else the holders of its keys; with a RateLimit, per key (or
    per client address when there are no keys). `wrong_keys` limits the wrong keys of each client address."""

    def __init__(self, keys: KeyRing | None = None, rate: RateLimit | None = None,
                 wrong_keys: RateLimit | None = None) -> None:
        self.keys, self.rate = keys, rate
        self.wrong_keys = wrong_keys or RateLimit(WRONG_KEYS_PER_MINUTE)

    def check(self, key: str | None, client: str, limited: bool = True) -> bytes | None:
        """The identity of `key` (its digest; None on a server without keys), or Denied unless `key` opens the
        server (and, when `limited`, the caller is within its rate)."""
        caller: Hashable = client
        identity = None
        if self.keys is not None:
            if not key:
                raise Denied(403, "this server needs an API key: api_key (LibreTranslate), the header "
                                  "Authorization: DeepL-Auth-Key KEY (DeepL) or Authorization: Bearer KEY (any)")
            wait = self.wrong_keys.wait(client, take=False)
            if wait > 0:  # checked before the key: else a guesser would still learn which key is right
                raise Denied(429, f"too many wrong API keys from this address: more than "
                                  f"{self.wrong_keys.capacity:.0f} a minute; try again in {math.ceil(wait)} s",
                             retry_after=math.ceil(wait))
            identity = self.keys.identify(key)
            if identity is None:
                self.wrong_keys.wait(client)
                raise Denied(403, "invalid API key")
            caller = identity
        if limited and self.rate is not None:
            wait = self.rate.wait(caller)
            if wait > 0:
                raise Denied(429, f"too many requests: more than {self.rate.capacity:.0f} a minute; try again in "
                                  f"{math.ceil(wait)} s", retry_after=math.ceil(wait))
        return identity


def header_key(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer KEY` or `Authorization: DeepL-Auth-Key KEY` header."""
    scheme, _, key = (authorization or "").strip().partition(" ")
    return (key.strip() or None) if scheme.lower() in SCHEMES else None


def request_key(headers: Iterable[tuple[bytes, bytes]], field: object = None) -> str | None:
    """The one key a request sends: in its Authorization header, or in a body field (`field`: LibreTranslate's
    api_key, "" or None for none, a list for a form field's values). A request has one identity: two Authorization
    headers, two keys in the field, or a field and a header that disagree are Denied (400), whatever the keys."""
    sent = [value for name, value in headers if name.lower() == b"authorization"]
    if len(sent) > 1:
        raise Denied(400, f"{len(sent)} Authorization headers: a request sends one key")
    fields = field if isinstance(field, list) else [] if field in (None, "") else [field]
    if not all(isinstance(value, str) for value in fields):
        raise Denied(400, "api_key must be a string")
    keys = {key for key in fields if key}
    if len(keys) > 1:
        raise Denied(400, "two api_key values: a request sends one key")
    header = header_key(sent[0].decode("latin-1")) if sent else None
    if keys and header is not None and keys != {header}:
        raise Denied(400, "the api_key field and the Authorization header hold different keys: send one")
    return next(iter(keys), header)


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
        try:
            key = request_key(scope.get("headers", []))
            scope[IDENTITY] = self.access.check(key, client_address(scope), limited=path not in self.unlimited)
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
