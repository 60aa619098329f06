"""API keys and per-key request rates of nmt-serve.

Keys (one a line in a key file) are kept only as SHA-256 digests, compared in constant time and never logged.
Wrong keys are rate limited per client address, so guessing is slow.
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
SCHEMES = ("bearer", "deepl-auth-key")
MAX_BUCKETS = 4096
WRONG_KEYS_PER_MINUTE = 10


IDENTITY = "nmt.identity"  # the ASGI scope's key for the request key's digest


class Denied(Exception):
    """A request refused for its credentials (400, 403) or its rate (429, with `retry_after` seconds)."""

    def __init__(self, status: int, message: str, retry_after: int = 0) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def read_keys(path: Path) -> frozenset[bytes]:
    """The digests of the keys in `path`; ConfigError names the line, never a key."""
    where = f"--api-keys {path}"
    try:
        if path.stat().st_size > MAX_KEY_FILE_BYTES:
            raise ConfigError(f"{where}: larger than {MAX_KEY_FILE_BYTES:,} bytes; one key a line is expected")
        raw = read_regular(path, "--api-keys")  # never a FIFO or device, even if replaced since the stat
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except FileError as err:
        raise ConfigError(str(err)) from None
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
    """The keys of a key file, re-read by `reload` (on SIGHUP)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._digests = read_keys(self.path)

    def __len__(self) -> int:
        return len(self._digests)

    def reload(self) -> int:
        """Re-read the file (keys stay on ConfigError); returns the number of keys."""
        self._digests = read_keys(self.path)
        return len(self._digests)

    def identify(self, key: str) -> bytes | None:
        """`key`'s digest, or None if unknown; in time independent of which key matches."""
        digest, found = _digest(key), False
        for known in self._digests:
            found |= hmac.compare_digest(known, digest)
        return digest if found else None


class RateLimit:
    """A token bucket per caller (`per_minute` in a burst, refilled evenly); an LRU of `size` buckets."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic, size: int = MAX_BUCKETS) -> None:
        self.capacity, self.rate, self.clock, self.size = float(per_minute), per_minute / 60.0, clock, size
        self.buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # caller -> (tokens, when)

    def wait(self, caller: Hashable, take: bool = True) -> float:
        """Seconds until `caller` has a token; 0 when it has one (taken if `take`)."""
        now = self.clock()
        known = self.buckets.get(caller)
        if known is None and not take:
            return 0.0
        tokens, then = known or (self.capacity, now)
        tokens = min(self.capacity, tokens + (now - then) * self.rate)
        wait = (1.0 - tokens) / self.rate if tokens < 1.0 else 0.0
        self.buckets[caller] = (tokens - 1.0 if take and not wait else tokens, now)
        self.buckets.move_to_end(caller)
        if len(self.buckets) > self.size:
            self.buckets.popitem(last=False)
        return wait


class Access:
    """Who may call (anyone without a KeyRing) and how often (per key, else per client address)."""

    def __init__(self, keys: KeyRing | None = None, rate: RateLimit | None = None,
                 wrong_keys: RateLimit | None = None) -> None:
        self.keys, self.rate = keys, rate
        self.wrong_keys = wrong_keys or RateLimit(WRONG_KEYS_PER_MINUTE)

    def check(self, key: str | None, client: str, limited: bool = True) -> bytes | None:
        """`key`'s digest (None without keys); Denied for a bad key or, when `limited`, over the rate."""
        caller: Hashable = client
        identity = None
        if self.keys is not None:
            if not key:
                raise Denied(403, "this server needs an API key: api_key (LibreTranslate), the header "
                                  "Authorization: DeepL-Auth-Key KEY (DeepL) or Authorization: Bearer KEY (any)")
            wait = self.wrong_keys.wait(client, take=False)
            if wait > 0:  # before the key, so a guesser learns nothing
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
    """The key of a Bearer or DeepL-Auth-Key Authorization header."""
    scheme, _, key = (authorization or "").strip().partition(" ")
    return (key.strip() or None) if scheme.lower() in SCHEMES else None


def request_key(headers: Iterable[tuple[bytes, bytes]], field: object = None) -> str | None:
    """The one key a request sends, in its Authorization header or `field` (LibreTranslate's api_key); two
    different keys are Denied (400)."""
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
    """ASGI middleware refusing bad keys (403) and excess rates (429); `open_paths` pass, `own_prefix` paths
    check keys themselves, `unlimited` paths skip the rate. `error_body` shapes each API's errors."""

    def __init__(self, app: Any, access: Access, error_body: Callable[[str, str], dict[str, Any]],
                 open_paths: frozenset[str] = frozenset(), own_prefix: str = "\0",
                 unlimited: frozenset[str] = frozenset()) -> None:
        self.app, self.access, self.error_body = app, access, error_body
        self.open_paths, self.own_prefix, self.unlimited = open_paths, own_prefix, unlimited

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        path = scope.get("path", "")
        if (scope["type"] != "http" or path in self.open_paths or path.startswith(self.own_prefix)
                or scope["method"] == "OPTIONS"):  # CORS preflights carry no key
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
    """Answer `denied` with `body` as JSON."""
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if denied.retry_after:
        headers.append((b"retry-after", str(denied.retry_after).encode()))
    await send({"type": "http.response.start", "status": denied.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
