"""Safe file output and input: atomic writes, OS errors in plain words, outputs that can never replace an input,
reads of regular files only (their bytes, their sha256), and advisory locks that die with their process."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from nmt.errors import DataError, FileError

# Errors only a write can cause: inside an output block they are the output's fault, whoever raised them.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}
_CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EFBIG: "file too large (a file size limit was reached)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "it is a folder",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENOENT: "no such file or folder",
    errno.ENAMETOOLONG: "file name too long",
}


def cause(err: OSError) -> str:
    """The reason of an OS error, in plain words."""
    return _CAUSES.get(err.errno, err.strerror or type(err).__name__)


def describe_os_error(err: OSError) -> str:
    """One line naming the path (when the error has one) and the cause."""
    names = [str(n) for n in (err.filename, err.filename2) if n is not None]
    return f"{' -> '.join(names)}: {cause(err)}" if names else cause(err)


def new_mode(folder: bool = False) -> int:
    """The permissions open() or mkdir() give under the umask; mkstemp's 0600 would hide shared outputs."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


def through_links(path: Path, flag: str = "") -> Path:
    """Where writing `path` lands through its links; FileError for a stream such as /dev/stdout."""
    for _ in range(40):  # the kernel's own limit on links in a row
        if not path.is_symlink():
            return path
        target = os.readlink(path)
        if target.startswith(("/proc/", "/dev/fd/")):
            raise FileError(f"{flag + ' ' if flag else ''}{path}: is a stream, not a file; leave the output flag "
                            "out to write to stdout")
        path = path.parent / target
    raise FileError(f"{path}: too many levels of symbolic links")


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Write to a temporary file beside `path`, renamed into place only when the block succeeds; the write's OS
    errors become FileError naming `path`."""
    path = through_links(Path(path))
    if path.is_dir():
        raise FileError(f"{path}: is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise FileError(f"{path}: is not a regular file (a device, pipe or socket); give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise FileError(f"{path}: cannot write ({cause(err)})") from None
    finishing = True  # errors before and after the caller's block are this output's own
    try:
        os.fchmod(fd, new_mode())
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            finishing = False
            yield handle
            finishing = True
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if finishing or err.errno in _WRITE_ERRNOS:
            raise FileError(f"{path}: cannot write ({cause(err)}); the previous file, if any, is unchanged") from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _same(a: Path, b: Path) -> bool:
    """True when two paths name one file: equal after resolving links, or one inode (hard links)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _writable_ancestor(path: Path) -> Path:
    """The nearest existing folder above `path` (where a new file or folder would be created)."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    return parent


Named = Iterable[tuple[str, "str | Path | None"]]  # (flag or key, path) pairs; a None path is skipped


def write_json(path: str | Path, data: dict) -> None:
    """`data` as indented JSON, written atomically (a reader sees the old file or the whole new one)."""
    with atomic_output(path) as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def check_output(flag: str, path: str | Path, inputs: Named = (), folder: bool = False) -> Path:
    """Refuse, before any work, an output that cannot be written or is one of `inputs` (also through links)."""
    path = Path(path)
    through_links(path, flag)
    if folder and path.exists() and not path.is_dir():
        raise FileError(f"{flag} {path}: is a file; give a folder")
    if not folder and path.is_dir():
        raise FileError(f"{flag} {path}: is a folder; give a file name")
    if not folder and path.exists() and not path.is_file():
        raise FileError(f"{flag} {path}: is not a regular file (a device, pipe or socket); give a file name")
    ancestor = _writable_ancestor(path)
    if not ancestor.is_dir():
        raise FileError(f"{flag} {path}: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise FileError(f"{flag} {path}: cannot write into {ancestor} (permission denied or read-only)")
    if path.is_file() and not os.access(path, os.W_OK):
        raise FileError(f"{flag} {path}: cannot replace the file (permission denied or read-only)")
    for name, source in inputs:
        if source is not None and _same(path, Path(source)):
            raise FileError(f"{flag} {path}: is the same file as {name} {source}; refusing to overwrite an input "
                              "(choose another output path)")
    return path


def check_input(flag: str, path: str | Path) -> Path:
    """Refuse an input file that is missing, a folder, not a regular file or unreadable, before any work."""
    path = Path(path)
    if not path.exists():
        raise FileError(f"{flag} {path}: file not found")
    if path.is_dir():
        raise FileError(f"{flag} {path}: is a folder; give a file")
    check_regular(path, flag)
    if not os.access(path, os.R_OK):
        raise FileError(f"{flag} {path}: cannot read the file (permission denied)")
    return path


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _not_regular(path: Path, mode: int, flag: str) -> FileError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return FileError(f"{flag + ' ' if flag else ''}{path}: is {kind}, not a regular file; give a file")


def check_regular(path: str | Path, flag: str = "") -> None:
    """FileError for an existing path that is not a regular file, without opening it (a FIFO may block forever,
    /dev/zero never ends); a missing path passes."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise _not_regular(Path(path), mode, flag)


def read_regular(path: str | Path, flag: str = "", limit: int | None = None) -> bytes:
    """The bytes of a regular file as it was when opened; FileError, before a byte is read, for anything else or
    for more than `limit` bytes. OSErrors pass unchanged."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(Path(path), info.st_mode, flag)
        if limit is not None and info.st_size > limit:
            raise FileError(f"{flag + ' ' if flag else ''}{path}: {info.st_size:,} bytes, more than the "
                            f"{limit:,} this file may hold")
        os.set_blocking(fd, True)
        chunks, left = [], info.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes; a path that is not a regular file (a FIFO, a device) is a DataError."""
    try:
        check_regular(path)
    except FileError as err:
        raise DataError(str(err)) from None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def take_lock(path: Path) -> tuple[IO[str] | None, str]:
    """An exclusive `flock` on `path` (created when missing), which the kernel drops when the process ends in any
    way: (the open handle, what a killed holder left in the file), or (None, the holder) while another process
    holds it. The file then names this process, for the messages of others; OSError when it cannot be opened."""
    while True:
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = handle.read().strip() or "another process"
            handle.close()
            return None, holder
        except BaseException:
            handle.close()
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()  # its last holder removed the file between our open and our lock: lock the new one
    try:
        stale = handle.read().strip()  # a holder that ended well emptied the file: text means it was killed
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on host {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
    except BaseException:
        handle.close()
        raise
    return handle, stale


def release_lock(handle: IO[str], path: Path, remove: bool = False) -> None:
    """Let go of a lock `take_lock` gave: the file emptied (or removed, while still held) and closed."""
    with contextlib.suppress(OSError):
        if remove:
            path.unlink()
        else:
            handle.seek(0)
            handle.truncate()
    handle.close()
