"""The immutable glossaries of DeepL's endpoints, per API key, in memory and optionally as files.

Each is kept as TSV text; its larger matching index is built on use, for the BUILT glossaries used last.
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
BUILT = 8  # an LRU over all owners
SHARED = b""  # the owner when the server has no keys


@dataclass(frozen=True)
class Info:
    """DeepL's GlossaryInfo."""

    glossary_id: str
    name: str
    ready: bool
    source_lang: str
    target_lang: str
    creation_time: str
    entry_count: int


@dataclass(frozen=True)
class Stored:
    """A glossary as kept: its info and its entries as TSV."""

    info: Info
    entries: bytes

    def tsv(self) -> str:
        return self.entries.decode("utf-8")


class TooMany(Exception):
    """The owner holds MAX_GLOSSARIES glossaries already."""


class GlossaryStore:
    """Glossaries by owner and id, thread-safe; with `folder`, also kept there as files."""

    def __init__(self, folder: str | Path | None = None, limit: int = MAX_GLOSSARIES) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.limit = limit
        self.lock = threading.Lock()
        self.owners: dict[str, dict[str, Stored]] = {}
        self.built: OrderedDict[str, Glossary] = OrderedDict()  # by id, an LRU
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
        """`stored` built for matching (its entries were checked at creation)."""
        with self.lock:
            found = self.built.get(stored.info.glossary_id)
            if found is not None:
                self.built.move_to_end(stored.info.glossary_id)
                return found
        entries = tuple(tuple(line.split("\t", 1)) for line in stored.tsv().splitlines())
        found = Glossary(entries)
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
        """Read the glossaries in `root`; FileError names a bad file."""
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
    """An owner's folder name: a hash of its key's digest, never the key."""
    return hashlib.sha256(b"nmt glossaries\0" + owner).hexdigest()[:32]
