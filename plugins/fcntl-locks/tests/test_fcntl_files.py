"""fcntl locks on disk: file names, the unlink race, cleaning, tokens, and real errors."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workhive.errors import ConfigError, LockSystemError, LockTimeout
from workhive_fcntl_locks import FcntlLocks, directory_from_url
from workhive_fcntl_locks import provider as provider_module


def exists(path: str) -> bool:
    return os.path.exists(path)


def overwrite(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


# Every code point, lone surrogates included.
any_text = st.text(st.characters(codec=None, categories=None), min_size=1, max_size=300)


# -- names ----------------------------------------------------------------------
@given(st.lists(any_text, min_size=2, max_size=20, unique=True))
def test_distinct_names_map_to_distinct_files_inside_the_directory(names: list[str]) -> None:
    locks = FcntlLocks("/srv/locks")
    paths = [locks.path_for(n) for n in names]
    assert len(set(paths)) == len(names)
    for path in paths:
        assert os.path.dirname(path) == "/srv/locks"
        base = os.path.basename(path)
        assert base not in (".", "..") and "/" not in base and "\0" not in base
        assert not base.startswith(".") and base.endswith(".lock")
        assert len(base.encode()) <= 255


@given(any_text)
def test_every_lock_file_is_one_that_listing_and_cleaning_recognise(name: str) -> None:
    base = os.path.basename(FcntlLocks("/srv/locks").path_for(name))
    stem = base[: -len(provider_module.SUFFIX)]
    assert provider_module._LOCK_STEM.fullmatch(stem) is not None, base


@given(any_text)
@pytest.mark.asyncio
async def test_any_name_is_locked_in_a_file_inside_the_directory(name: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        locks = FcntlLocks(os.path.join(root, "locks"))
        held = await locks.acquire(name, ttl=None, timeout=0, worker_id=None)
        assert os.listdir(root) == ["locks"]
        assert os.listdir(locks.directory) == [os.path.basename(locks.path_for(name))]
        assert (await locks.holder(name)).name == name  # type: ignore[union-attr]
        await locks.release(held)


# -- URLs -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("fcntl:///.workhive/locks", os.path.abspath(".workhive/locks")),
        ("fcntl:///rel/dir", os.path.abspath("rel/dir")),
        ("fcntl:////abs/dir", "/abs/dir"),
        ("fcntl://", os.path.abspath(".workhive/locks")),
        ("fcntl:///~/locks", os.path.expanduser("~/locks")),
    ],
)
def test_url_forms_follow_sqlite(url: str, expected: str) -> None:
    assert directory_from_url(url) == expected
    assert FcntlLocks(url).directory == expected


@pytest.mark.parametrize(
    "url", ["fcntl://host/dir", "fcntl:///d?x=1", "fcntl:relative", "sqlite:///x", "fcntl:///a\0b"]
)
def test_malformed_urls_raise_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        FcntlLocks(url)


def test_the_plugin_is_found_by_scheme() -> None:
    from workhive.plugin_manager import PluginManager

    plugin = PluginManager().get("locks", "fcntl")
    assert isinstance(plugin.factory("fcntl:////tmp/x"), FcntlLocks)


# -- the unlink race ----------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_waiter_that_locked_an_unlinked_file_retries_on_the_file_now_at_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locks = FcntlLocks(tmp_path)
    await locks.release(await locks.acquire("race", ttl=None, timeout=0, worker_id=None))
    path = locks.path_for("race")
    real_flock = fcntl.flock
    intruder: list[int] = []

    def flock_after_a_cleaner_struck(fd: int, op: int) -> Any:
        # Between our open and our flock: a cleaner unlinks the (free) file and a new
        # holder creates and locks a fresh one at the same path.
        if not intruder:
            os.unlink(path)
            new = os.open(path, os.O_RDWR | os.O_CREAT)
            real_flock(new, fcntl.LOCK_EX)
            intruder.append(new)
        return real_flock(fd, op)

    monkeypatch.setattr(provider_module.fcntl, "flock", flock_after_a_cleaner_struck)
    # Our flock on the old inode succeeds; without the fstat/stat check we would now "hold"
    # the lock next to the new holder.
    with pytest.raises(LockTimeout):
        await locks.acquire("race", ttl=None, timeout=0, worker_id=None)
    monkeypatch.undo()
    os.close(intruder[0])
    held = await locks.acquire("race", ttl=None, timeout=0, worker_id=None)
    await locks.release(held)


# -- cleaning and tokens ----------------------------------------------------------------------
@pytest.mark.asyncio
async def test_clean_deletes_only_free_lock_files(tmp_path: Path) -> None:
    locks, other = FcntlLocks(tmp_path), FcntlLocks(tmp_path)
    held = await locks.acquire("busy", ttl=None, timeout=0, worker_id=None)
    await locks.release(await locks.acquire("idle", ttl=None, timeout=0, worker_id=None))
    assert await other.clean() == ["idle"]
    assert exists(locks.path_for("busy"))
    assert not exists(locks.path_for("idle"))
    with pytest.raises(LockTimeout):
        await other.acquire("busy", ttl=None, timeout=0, worker_id=None)
    await locks.release(held)
    assert await other.clean() == ["busy"]
    assert sorted(os.listdir(tmp_path)) == [".token-floor", ".token-floor.lock"]


# Run in another process: can it take a write lock on the whole file? Not while this
# process holds a POSIX read lock on it.
_POSIX_PROBE = """
import fcntl, os, sys

fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print("held")
else:
    print("free")
"""


def _posix_lock_probe(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _POSIX_PROBE, str(path)], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


@pytest.mark.asyncio
async def test_other_files_in_the_directory_are_never_opened_listed_or_cleaned(tmp_path: Path) -> None:
    # The lock directory may be shared with other files: here one named like a lock file but
    # not made by workhive (a SQLite hive called jobs.lock, say), on which this process holds
    # a POSIX lock, as SQLite does. Opening and closing it would drop that lock; cleaning it
    # would delete the file.
    locks = FcntlLocks(tmp_path)
    await locks.release(await locks.acquire("idle", ttl=None, timeout=0, worker_id=None))
    held = await locks.acquire("busy", ttl=None, timeout=0, worker_id=None)
    other = tmp_path / "jobs.lock"
    other.write_bytes(b"precious\n")
    (tmp_path / "notes.queue").mkdir()
    fd = os.open(other, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH)
        assert _posix_lock_probe(other) == "held"
        assert [h.name for h in await locks.list_locks()] == ["busy"]
        assert _posix_lock_probe(other) == "held", "listing the locks opened jobs.lock and dropped this process's lock"
        assert await locks.clean() == ["idle"]
        assert _posix_lock_probe(other) == "held", "cleaning opened jobs.lock and dropped this process's lock"
    finally:
        os.close(fd)
    assert other.read_bytes() == b"precious\n"
    assert (tmp_path / "notes.queue").is_dir()
    await locks.release(held)


@pytest.mark.asyncio
async def test_tokens_keep_rising_after_the_file_was_cleaned(tmp_path: Path) -> None:
    locks = FcntlLocks(tmp_path)
    tokens = []
    for name in ("a", "a", "b", "a"):
        held = await locks.acquire(name, ttl=None, timeout=0, worker_id=None)
        tokens.append(held.token)
        await locks.release(held)
    await locks.clean()
    again = await FcntlLocks(tmp_path).acquire("a", ttl=None, timeout=0, worker_id=None)
    assert again.token > tokens[-1]


@pytest.mark.asyncio
async def test_two_providers_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    a, b = FcntlLocks(tmp_path), FcntlLocks(tmp_path)
    held = await a.acquire("same", ttl=None, timeout=0, worker_id=None)
    with pytest.raises(LockTimeout):
        await b.acquire("same", ttl=None, timeout=0, worker_id=None)
    with pytest.raises(LockTimeout):
        await a.acquire("same", ttl=None, timeout=0, worker_id=None)
    await a.release(held)


# -- real errors are not "held" --------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_lock_directory_under_a_file_raises_lock_system_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    locks = FcntlLocks(tmp_path / "file" / "locks")
    with pytest.raises(LockSystemError, match="file/locks") as info:
        await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
    assert not isinstance(info.value, LockTimeout)


@pytest.mark.asyncio
@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="needs sysfs, which refuses new directories")
async def test_a_directory_that_cannot_be_created_raises_lock_system_error() -> None:
    locks = FcntlLocks("/sys/workhive-locks-test")
    with pytest.raises(LockSystemError, match="/sys/workhive-locks-test"):
        await locks.acquire("x", ttl=None, timeout=5, worker_id=None)


@pytest.mark.asyncio
@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
async def test_an_unwritable_directory_raises_lock_system_error(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o500)
    try:
        with pytest.raises(LockSystemError, match="permission"):
            await FcntlLocks(tmp_path).acquire("x", ttl=None, timeout=5, worker_id=None)
    finally:
        os.chmod(tmp_path, 0o700)


@pytest.mark.asyncio
async def test_a_symlinked_lock_file_is_refused(tmp_path: Path) -> None:
    locks = FcntlLocks(tmp_path / "locks")
    os.makedirs(locks.directory)
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    os.symlink(target, locks.path_for("x"))
    with pytest.raises(LockSystemError, match="symlink"):
        await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
    assert target.read_text() == "precious"


@pytest.mark.asyncio
async def test_a_foreign_lock_file_raises_instead_of_resetting_the_token(tmp_path: Path) -> None:
    locks = FcntlLocks(tmp_path)
    await locks.release(await locks.acquire("x", ttl=None, timeout=0, worker_id=None))
    overwrite(locks.path_for("x"), b"not a record\n")
    with pytest.raises(LockSystemError, match="does not hold a workhive lock record"):
        await locks.acquire("x", ttl=None, timeout=0, worker_id=None)
    # ...and the failed attempt left nothing held
    os.unlink(locks.path_for("x"))
    await locks.release(await locks.acquire("x", ttl=None, timeout=0, worker_id=None))


# -- passwords in mistyped URLs, options given twice (issue 24) ---------------------------------
@pytest.mark.parametrize("char", ["@", "?", "#", "/", ":"])
def test_a_password_in_a_mistyped_url_is_never_shown(char: str) -> None:
    password = f"ssCANARY1{char}ssCANARY2{char}ssCANARY3"
    for url in (f"fcntl://user:{password}@host/locks", f"fcntl:user:{password}@host/locks"):
        with pytest.raises(ConfigError) as info:
            FcntlLocks(url)
        for text in (str(info.value), repr(info.value), repr(vars(info.value))):
            assert "CANARY" not in text, text


def test_options_given_twice_are_refused_and_no_directory_is_made(tmp_path: Path) -> None:
    # fcntl locks take no options at all, so a repeated one is refused with the rest.
    with pytest.raises(ConfigError, match="take none"):
        FcntlLocks(f"fcntl:///{tmp_path}/locks?lease=1&lease=2")
    assert list(tmp_path.iterdir()) == []
