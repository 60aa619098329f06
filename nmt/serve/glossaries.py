"""The glossaries of DeepL's glossary endpoints, held per API key (one shared set when the server has no keys): in
memory, and with a folder also as files there, so that they outlive a restart.

Each owner (the digest of its key) has at most MAX_GLOSSARIES; each glossary is checked as `nmt.glossary` checks
one (DeepL's entry rules, at most nmt.glossary.MAX_ENTRIES entries). A glossary is immutable, as DeepL's v2
glossaries are: create, read, delete. The files are one JSON file per glossary, written atomically, in a folder
per owner named by a hash of the key's digest (never the key).

A glossary is held as its entries' text (TSV in UTF-8: as many bytes as the entries hold), and its matching index
(`Glossary`, many times larger) is built when a translation uses it; the BUILT glossaries used last are kept
built, for all owners together. So an owner's glossaries take about their text in memory.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from nmt.errors import DataError, FileError
from nmt.fileio import atomic_output
from nmt.glossary import MAX_TERM_BYTES, Glossary

MAX_GLOSSARIES = 100  # per API key
BUILT = 8  # glossaries kept built for matching (an LRU), all owners together
SHARED = b""  # the owner of every glossary when the server has no keys


@dataclass(frozen=True)
class Info:
    """What DeepL says of a glossary (its GlossaryInfo), without the entries."""

    glossary_id: str
    name: str
    ready: bool
    source_lang: str
    target_lang: str
    creation_time: str
    entry_count: int


@dataclass(frozen=True)
class Stored:
    """A glossary as kept: what DeepL says of it and its entries as TSV in UTF-8."""

    info: Info
    entries: bytes

    def tsv(self) -> str:
        return self.entries.decode("utf-8")


class TooMany(Exception):
    """The owner holds MAX_GLOSSARIES glossaries already."""


class GlossaryStore:
    """Glossaries by owner and id; thread-safe. With `folder`, each is also a file there, read back at start."""

    def __init__(self, folder: str | Path | None = None, limit: int = MAX_GLOSSARIES) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.limit = limit
        self.lock = threading.Lock()
        self.owners: dict[str, dict[str, Stored]] = {}
        self.built: OrderedDict[str, Glossary] = OrderedDict()  # by glossary id, the one used last at the end
        if self.folder is not None:
            self._load(self.folder)

    def create(self, owner: bytes, name: str, source_lang: str, target_lang: str, glossary: Glossary) -> Info:
        """Add a glossary for `owner`; DataError for a bad name, TooMany past the limit."""
        if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_TERM_BYTES:
            raise DataError(f"the glossary name must hold 1 to {MAX_TERM_BYTES} bytes of UTF-8")
        info = Info(str(uuid.uuid4()), name, True, source_lang, target_lang,
                    datetime.now(timezone.utc).isoformat(timespec="microseconds"), len(glossary))
        folder = _owner_folder(owner)
        with self.lock:
            held = self.owners.setdefault(folder, {})
            if len(held) >= self.limit:
                raise TooMany(f"this server keeps at most {self.limit} glossaries per API key; delete one first")
            if self.folder is not None:
                (self.folder / folder).mkdir(parents=True, exist_ok=True)
                with atomic_output(self.folder / folder / f"{info.glossary_id}.json") as handle:
                    json.dump({"info": asdict(info), "entries": glossary.entries}, handle, ensure_ascii=False)
            held[info.glossary_id] = Stored(info, glossary.to_tsv().encode("utf-8"))
        return info

    def list(self, owner: bytes) -> list[Info]:
        """The owner's glossaries, oldest first."""
        with self.lock:
            return sorted((s.info for s in self.owners.get(_owner_folder(owner), {}).values()),
                          key=lambda info: info.creation_time)

    def get(self, owner: bytes, glossary_id: str) -> Stored | None:
        with self.lock:
            return self.owners.get(_owner_folder(owner), {}).get(glossary_id)

    def glossary(self, stored: Stored) -> Glossary:
        """The glossary of `stored`, built for matching (its entries were checked when it was made)."""
        with self.lock:
            found = self.built.get(stored.info.glossary_id)
            if found is not None:
                self.built.move_to_end(stored.info.glossary_id)
                return found
        entries = tuple(tuple(line.split("\t", 1)) for line in stored.tsv().splitlines())
        found = Glossary(entries)  # each line holds one tab: (source, target)
        with self.lock:
            self.built[stored.info.glossary_id] = found
            while len(self.built) > BUILT:
                self.built.popitem(last=False)
        return found

    def delete(self, owner: bytes, glossary_id: str) -> bool:
        """Remove a glossary (and its file); False if the owner has none of that id."""
        folder = _owner_folder(owner)
        with self.lock:
            if self.owners.get(folder, {}).pop(glossary_id, None) is None:
                return False
            self.built.pop(glossary_id, None)
            if self.folder is not None:
                (self.folder / folder / f"{glossary_id}.json").unlink(missing_ok=True)
            return True

    def _load(self, root: Path) -> None:
        """Read the glossaries kept in `root` (made if missing); FileError names a file that cannot serve."""
        try:
            root.mkdir(parents=True, exist_ok=True)
            files = sorted(root.glob("*/*.json"))
        except OSError as err:
            raise FileError(f"--glossary-dir {root}: cannot be used ({err.strerror})") from None
        for path in files:
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                info = Info(**record["info"])
                glossary = Glossary.of([tuple(pair) for pair in record["entries"]], str(path))
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise FileError(f"--glossary-dir: {path} is not a glossary this server wrote ({err})") from None
            self.owners.setdefault(path.parent.name, {})[info.glossary_id] = Stored(info, glossary.to_tsv().encode())


def _owner_folder(owner: bytes) -> str:
    """The name under which an owner's glossaries are kept: a hash of its key's digest."""
    return hashlib.sha256(b"nmt glossaries\0" + owner).hexdigest()[:32]
