"""How SQLite's errors become workhive errors that name the file and say what to do.

The classes are the core's (``workhive.errors``); this module only decides
which one an error is, by SQLite's result code (or its text where Python
gives no code), and writes the message.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from workhive.errors import StorageCorrupt, StorageError, StorageUnavailable

__all__ = ["corrupt", "failure", "foreign", "is_busy", "is_notadb", "is_stale_snapshot"]

# SQLite primary result codes.
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26
#: The extended code of a deferred transaction's first write after another connection committed.
SQLITE_BUSY_SNAPSHOT = SQLITE_BUSY | (2 << 8)


def _primary_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``exc`` (Python >= 3.11 carries it), else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLITE_BUSY/SQLITE_LOCKED: another connection holds the lock, try again."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11
    if code is not None:
        return code & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)  # extended codes keep the low byte
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_stale_snapshot(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLITE_BUSY_SNAPSHOT: a deferred transaction read a snapshot another connection has
    committed past, so its first write was refused, nothing changed (False before Python 3.11: no code)."""
    return getattr(exc, "sqlite_errorcode", None) == SQLITE_BUSY_SNAPSHOT


def is_notadb(exc: sqlite3.Error) -> bool:
    """SQLITE_NOTADB: the file's first page is not a SQLite header (by code, or by text before 3.11)."""
    primary = _primary_code(exc)
    return primary == SQLITE_NOTADB or (primary is None and "not a database" in str(exc))


def failure(path: Path, exc: sqlite3.Error) -> StorageError:
    """The workhive error for a SQLite error met by an operation on the store at ``path``."""
    text = str(exc)
    primary = _primary_code(exc)
    if primary == SQLITE_CORRUPT or (primary is None and "malformed" in text) or is_notadb(exc):
        return corrupt(path, text)
    if primary == SQLITE_FULL or (primary is None and "is full" in text):
        return StorageError(
            f"SQLite store {path} is full ({text}): the disk holding {path.parent} has no space "
            "left (or the file reached its size limit); the call that met it changed nothing. Free space "
            "there, then run again",
            path=str(path),
            sqlite_error="SQLITE_FULL",
        )
    if "readonly" in text or "unable to open" in text:
        return StorageUnavailable(
            f"SQLite store {path} cannot be written: {text}; check the file's and directory's permissions",
            path=str(path),
        )
    return StorageError(f"SQLite store {path}: {text}", path=str(path))


def corrupt(path: Path, found: str) -> StorageCorrupt:
    """A damaged store: what was found, and how to recover it."""
    return StorageCorrupt(
        f"SQLite store {path} is damaged ({found}): stop every process using it, move {path.name} and its "
        f"-wal and -shm files aside, and restore them from a backup (`sqlite3 {path} .recover` may salvage "
        "what is readable into a new file)",
        path=str(path),
    )


def foreign(path: Path) -> StorageUnavailable:
    """A file at ``path`` whose first page is no SQLite header: refused, never altered."""
    return StorageUnavailable(
        f"{path} exists but is not a SQLite database; point the URL at a new file "
        "(e.g. sqlite:///.workhive/hive.db) or move that file away (if it was a workhive store, its "
        "first page is damaged: restore it from a backup)",
        path=str(path),
    )
