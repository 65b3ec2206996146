"""Writes that a kill cannot leave half done, and saves that cannot interleave.

- `atomic_write_bytes` / `atomic_write_text`: the data goes to a temporary sibling (``.NAME.*.tmp``),
  which is flushed and fsynced, then renamed over the target and the directory fsynced: a reader
  (and a process started after a crash) sees the old file or the whole new one.
- `replace_directory`: a directory save. The new directory is filled beside the target
  (``.NAME.new-*``), fsynced, then swapped in with two renames: the target becomes ``.NAME.old``
  and the new directory takes its name; the old copy is removed only once the new one is in place.
  A kill between the two renames leaves ``.NAME.old`` alone: `readable_directory` returns it, and
  the next save under the lock puts it back first.
- `locked`: an exclusive ``fcntl.flock`` on ``.NAME.lock`` beside the target, so concurrent saves to
  one path (threads or processes) run one after the other; ``wait=False`` refuses with
  `SaveInProgressError` instead of waiting.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Callable, Iterator

from rhea.errors import RheaError


class StorageError(RheaError, OSError):
    """A file or directory cannot be written where asked (no permission, a file in the way, disk full)."""


class OutputNotEmptyError(StorageError, FileExistsError):
    """An output directory that must be new or empty already holds files."""


class SaveInProgressError(StorageError):
    """Another save to the same path holds its lock (raised only when asked not to wait)."""


OLD_SUFFIX = ".old"
_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def not_utf8(path: str | os.PathLike, error: UnicodeDecodeError) -> str:
    """The message for a text file that is not UTF-8: where the first bad byte is and how to fix it."""
    bad = error.object[error.start:error.start + 1].hex() if isinstance(error.object, (bytes, bytearray)) else "?"
    return (f"{path} is not UTF-8 text (byte 0x{bad} at offset {error.start}: {error.reason}); save it as UTF-8 "
            "(e.g. `iconv -f latin1 -t utf-8`) or pass the right file")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_directory(path: str | os.PathLike) -> None:
    """Make the entries of `path` (renames, new files) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _describe(e: OSError, path: Path, what: str) -> StorageError:
    reason = e.strerror or str(e)
    hint = "pass a path in a writable directory"
    if e.errno in (errno.ENOTDIR, errno.EEXIST) or (path.exists() and not path.is_dir() and what == "directory"):
        hint = "a file is in the way: pass another path, or remove that file"
    elif e.errno == errno.ENOSPC:
        hint = "free some disk space or pass a path on another disk"
    return StorageError(f"cannot write the {what} {path}: {reason}; {hint}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` so that a kill leaves the old file or the new one, never a mix."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _describe(e, path, "file") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _describe(e, path, "file") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    return atomic_write_bytes(path, text.encode(encoding))


def lock_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def locked(path: str | os.PathLike, *, wait: bool = True) -> Iterator[None]:
    """Hold the save lock of `path` (threads of this process and other processes alike).

    The lock file ``.NAME.lock`` stays beside the target (removing it would let two savers lock two
    different files); it holds no data.
    """
    import fcntl

    path = Path(path).absolute()
    with _thread_locks_guard:
        tlock = _thread_locks.setdefault(str(path), threading.Lock())
    if not tlock.acquire(blocking=wait):
        raise SaveInProgressError(f"{path} is being saved by another thread; wait for it, or save to another path")
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise _describe(e, lock_path(path), "lock file") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise SaveInProgressError(f"{path} is being saved by another process; wait for it, or save to "
                                          "another path") from None
            yield
        finally:
            os.close(fd)  # closing releases the flock
    finally:
        tlock.release()


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(dirpath)


def old_copy(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.parent / f".{path.name}{OLD_SUFFIX}"


def _recover(path: Path) -> None:
    """Under the lock: finish what a killed save left (put the old copy back, drop half-built copies)."""
    old = old_copy(path)
    if old.is_dir():
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)  # the swap finished; only the cleanup was cut
        else:
            os.rename(old, path)  # cut between the two renames: the old copy is the good one
    for stale in path.parent.glob(f".{path.name}.new-*"):
        shutil.rmtree(stale, ignore_errors=True)


def replace_directory(path: str | os.PathLike, fill: Callable[[Path], None], *, wait: bool = True,
                      names: frozenset[str] | set[str] | None = None) -> Path:
    """Save a directory: `fill(tmp)` writes the new contents into a fresh sibling directory, which then
    replaces `path` (old copy kept until the new one is in place). Saves to one path are serialized.

    Refused with `StorageError` before anything is written: a file at `path`, and, when `names` is
    given, an existing directory holding anything else than those names (replacing it would delete
    the other files: a save goes to a new, empty or earlier-saved directory).
    """
    path = Path(path)

    def check_not_a_file() -> None:
        try:  # one stat: a concurrent save may rename the directory away between two checks
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(mode):
            raise StorageError(f"cannot save a directory to {path}: a file is in the way; pass another path, or "
                               "remove that file")

    def check_contents() -> None:
        if names is None:
            return
        try:
            listing = list(path.iterdir())
        except (FileNotFoundError, NotADirectoryError):  # not there (or renamed away by a concurrent save)
            return
        other = sorted(p.name for p in listing if p.name not in names)
        if other:
            shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
            raise StorageError(f"{path} holds other files ({shown}), which a save would replace; pass a new or "
                               "empty directory, or one an earlier save wrote")

    check_not_a_file()
    check_contents()
    with locked(path, wait=wait):
        check_not_a_file()
        check_contents()
        try:
            _recover(path)
            new = path.parent / f".{path.name}.new-{uuid.uuid4().hex[:12]}"
            new.mkdir()
        except OSError as e:
            raise _describe(e, path, "directory") from None
        try:
            fill(new)
            _fsync_tree(new)
            old = old_copy(path)
            if path.exists():
                os.rename(path, old)
            os.rename(new, path)
            fsync_directory(path.parent)
        except OSError as e:
            shutil.rmtree(new, ignore_errors=True)
            raise _describe(e, path, "directory") from None
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)
    return path


def readable_directory(path: str | os.PathLike, marker: str) -> Path:
    """`path`, or the old copy a save killed between its two renames left beside it (``.NAME.old``),
    whichever holds `marker`; `path` when neither does (the caller then reports what is missing)."""
    path = Path(path)
    if (path / marker).is_file():
        return path
    old = old_copy(path)
    if not path.exists() and (old / marker).is_file():
        return old
    return path


def check_writable_directory(path: str | os.PathLike, what: str) -> Path:
    """Raise `StorageError` unless `path` is a directory this process can write into, or could create
    (its nearest existing ancestor is a writable directory); writes nothing. `what` names the option.

    Meant to run before a model loads, so a run never computes for minutes and then fails to save.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).strip() or "\x00" in os.fspath(path):
        raise StorageError(f"the {what} {path!r} names no directory; pass the path of a directory to write into")
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is a file" if probe == path else f"is under {probe}, which is a file"
        raise StorageError(f"{what} {path} {where}, not a directory; pass a directory path (new or existing)")
    where = "" if probe == path else f" (its nearest existing folder {probe} is not writable)"
    if not os.access(probe, os.W_OK | os.X_OK):
        raise StorageError(f"{what} {path} cannot be written{where}: permission denied; pass a directory you can "
                           "write to")
    try:  # the permission bits do not tell a read-only mount (or root on one) apart: try a file
        fd, name = tempfile.mkstemp(dir=probe, prefix=".rhea-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise StorageError(f"{what} {path} cannot be written{where}: {e.strerror or e}; pass a directory you can "
                           "write to") from None
    return path


def read_text_file(path: str | os.PathLike, error: type[Exception], what: str = "file") -> str:
    """The UTF-8 text of `path` (decompressed when its name ends in ``.gz``), or `error` (a named error class)
    saying what is wrong: missing, a directory, unreadable, not gzip, or not UTF-8."""
    path = Path(path)
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            import gzip
            import zlib

            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as e:
                raise error(f"{what} {path} is not a readable gzip file ({e}); pass the file as written, or "
                            "decompress it and pass the plain file") from None
        return data.decode("utf-8")
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist; pass the path of an existing file") from None
    except IsADirectoryError:
        raise error(f"{what} {path} is a directory; pass a file") from None
    except PermissionError:
        raise error(f"{what} {path} cannot be read: permission denied") from None
    except UnicodeDecodeError as e:
        raise error(not_utf8(path, e)) from None


#: what an output stem may already end in (``--out runs/x.json``): that suffix is replaced, not kept
OUTPUT_SUFFIXES = (".json", ".png", ".md", ".jsonl", ".csv", ".txt", ".html", ".svg", ".pdf")


def output_file(stem: str | os.PathLike, suffix: str) -> Path:
    """The file `stem` + `suffix` that an ``--out STEM`` option names.

    A dot inside the stem stays (``Path.with_suffix`` would cut the stem there, so two runs named
    after ``qwen2.5-...`` would both write ``qwen2.json``); a stem that already ends in an output
    suffix has it replaced.

    >>> str(output_file("runs/fact_recall_qwen2.5-coder-1.5b", ".json"))
    'runs/fact_recall_qwen2.5-coder-1.5b.json'
    >>> str(output_file("runs/recall.json", ".png")), str(output_file("runs/recall", ".rows.jsonl"))
    ('runs/recall.png', 'runs/recall.rows.jsonl')
    """
    stem = Path(stem)
    if stem.suffix.lower() in OUTPUT_SUFFIXES:
        return stem.with_suffix(suffix)
    return stem.with_name(stem.name + suffix)
