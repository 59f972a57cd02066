"""Opening a store: URL forms, factory options, bad paths, foreign files, the plugin entry point."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import workhive
from workhive.errors import ConfigError, HiveNotFound, StorageUnavailable
from workhive_sqlite import SqliteStorage, parse_url
from workhive_sqlite.schema import APPLICATION_ID, SCHEMA_VERSION


class TestUrls:
    def test_three_slashes_is_relative_four_is_absolute(self) -> None:
        assert parse_url("sqlite:///.workhive/hive.db").path == Path(".workhive/hive.db")
        assert parse_url("sqlite:////var/lib/hive.db").path == Path("/var/lib/hive.db")

    def test_defaults_and_options(self) -> None:
        config = parse_url("sqlite:///hive.db")
        assert (config.synchronous, config.busy_timeout_ms) == ("normal", 5000)
        config = parse_url("sqlite:///hive.db?synchronous=FULL&busy_timeout=250")
        assert (config.synchronous, config.busy_timeout_ms) == ("full", 250)

    @pytest.mark.parametrize(
        ("url", "says"),
        [
            ("sqlite://host/hive.db", "names a host"),
            ("sqlite:/hive.db", "malformed"),
            ("sqlite:///", "no file name"),
            ("sqlite:///dir/", "no file name"),
            ("sqlite:///:memory:", "memory://"),
            ("sqlite:///hive.db?synchronous=sometimes", "synchronous"),
            ("sqlite:///hive.db?busy_timeout=soon", "busy_timeout"),
            ("sqlite:///hive.db?busy_timeout=-1", "busy_timeout"),
            ("sqlite:///hive.db?journal=delete", "unknown option"),
            ("postgres:///hive.db", "not a sqlite"),
        ],
    )
    def test_malformed_urls_are_config_errors_that_say_why(self, url: str, says: str) -> None:
        with pytest.raises(ConfigError, match=says):
            SqliteStorage(url)

    def test_relative_path_is_fixed_when_built(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(tmp_path)
        storage = SqliteStorage("sqlite:///sub/hive.db")
        assert storage.path == tmp_path / "sub" / "hive.db"


@pytest.mark.asyncio
async def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a/b/c/hive.db"
    async with workhive.open(url) as hive:
        await hive.pool("p").push(1)
    assert (tmp_path / "a" / "b" / "c" / "hive.db").is_file()


@pytest.mark.asyncio
async def test_reopening_keeps_items_and_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hive.db"
    async with workhive.open(url) as hive:
        item_id = await hive.pool("p").push({"keep": True})
    async with workhive.open(url) as hive:
        assert (await hive.pool("p").get(item_id)).data == {"keep": True}
    with sqlite3.connect(tmp_path / "hive.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.asyncio
async def test_a_directory_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "hive.db").mkdir()
    with pytest.raises(StorageUnavailable, match="is a directory") as info:
        await SqliteStorage(f"sqlite:///{tmp_path}/hive.db").open()
    assert str(tmp_path / "hive.db") in str(info.value)


@pytest.mark.asyncio
async def test_an_uncreatable_directory_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StorageUnavailable, match="cannot create the directory") as info:
        await SqliteStorage(f"sqlite:///{tmp_path}/file/sub/hive.db").open()
    assert str(tmp_path / "file" / "sub") in str(info.value)


@pytest.mark.asyncio
@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
async def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StorageUnavailable, match="not writable"):
            await SqliteStorage(f"sqlite:///{locked}/hive.db").open()
    finally:
        locked.chmod(0o700)


@pytest.mark.asyncio
async def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("shopping list: eggs, milk\n" * 200)
    with pytest.raises(StorageUnavailable, match="not a SQLite database") as info:
        await SqliteStorage(f"sqlite:///{path}").open()
    assert str(path) in str(info.value)
    assert path.read_text().startswith("shopping list")


@pytest.mark.asyncio
async def test_another_programs_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    with pytest.raises(StorageUnavailable, match="another program"):
        await SqliteStorage(f"sqlite:///{path}").open()
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"customers"}


@pytest.mark.asyncio
async def test_operations_before_open_say_to_open(tmp_path: Path) -> None:
    storage = SqliteStorage(f"sqlite:///{tmp_path}/hive.db")
    with pytest.raises(StorageUnavailable, match="not open"):
        await storage.pools()


@pytest.mark.asyncio
async def test_synchronous_option_reaches_the_connection(tmp_path: Path) -> None:
    storage = SqliteStorage(f"sqlite:///{tmp_path}/hive.db?synchronous=full")
    await storage.open()
    try:
        level = await storage._call(lambda: storage._db.conn.execute("PRAGMA synchronous").fetchone()[0])
        assert level == 2  # FULL
    finally:
        await storage.close()


@pytest.mark.asyncio
async def test_a_lock_held_past_the_bound_is_storage_unavailable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hive.db?busy_timeout=20"
    async with workhive.open(url) as hive:
        holder = sqlite3.connect(tmp_path / "hive.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StorageUnavailable, match="stayed locked") as info:
                await hive.pool("p").push(1)
            assert str(tmp_path / "hive.db") in str(info.value)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # Once the lock is gone the same hive works again: nothing was half-written.
        await hive.pool("p").push(2)
        assert (await hive.pool("p").stats()).pending == 1


def test_the_plugin_is_found_by_scheme_and_imports_cheaply() -> None:
    code = (
        "import sys, workhive\n"
        "from workhive.plugin_manager import default_manager\n"
        "plugin = default_manager().get('storage', 'sqlite')\n"
        "assert 'aiosqlite' not in sys.modules, 'aiosqlite imported before use'\n"
        "assert 'workhive_sqlite.backend' not in sys.modules\n"
        "print(plugin.name, plugin.all_schemes)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "sqlite ('sqlite',)"


class TestCreateFalse:
    """``create=False`` (read-only commands): only an existing hive opens, and nothing is ever created."""

    @pytest.mark.asyncio
    async def test_a_missing_file_is_hive_not_found_naming_it_and_nothing_is_created(self, tmp_path: Path) -> None:
        path = tmp_path / "hive.db"
        with pytest.raises(HiveNotFound, match="does not exist") as info:
            async with workhive.open(f"sqlite:///{path}", create=False):
                pass
        assert str(path) in str(info.value)
        assert os.listdir(tmp_path) == []

    @pytest.mark.asyncio
    async def test_a_missing_directory_is_hive_not_found_and_not_created(self, tmp_path: Path) -> None:
        path = tmp_path / "no-such-dir" / "x.db"
        with pytest.raises(HiveNotFound, match="no-such-dir"):
            await SqliteStorage(f"sqlite:///{path}", create=False).open()
        assert os.listdir(tmp_path) == []

    @pytest.mark.asyncio
    async def test_an_empty_file_is_not_a_hive_and_stays_empty(self, tmp_path: Path) -> None:
        path = tmp_path / "hive.db"
        path.touch()
        with pytest.raises(HiveNotFound, match="empty"):
            await SqliteStorage(f"sqlite:///{path}", create=False).open()
        assert os.listdir(tmp_path) == ["hive.db"] and path.stat().st_size == 0

    @pytest.mark.asyncio
    async def test_a_sqlite_file_without_the_schema_is_not_a_hive_and_is_left_alone(self, tmp_path: Path) -> None:
        path = tmp_path / "hive.db"
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA user_version = 0")
            conn.execute("VACUUM")  # writes the header: a valid, empty database
        before = path.read_bytes()
        with pytest.raises(HiveNotFound, match="no workhive schema"):
            await SqliteStorage(f"sqlite:///{path}", create=False).open()
        assert path.read_bytes() == before
        assert os.listdir(tmp_path) == ["hive.db"]

    @pytest.mark.asyncio
    async def test_an_existing_hive_opens_and_reads(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path}/hive.db"
        async with workhive.open(url) as hive:
            item_id = await hive.pool("p").push("kept")
        async with workhive.open(url, create=False) as hive:
            assert (await hive.pool("p").get(item_id)).data == "kept"

    def test_the_plugin_factory_takes_create(self, tmp_path: Path) -> None:
        hive = workhive.open(f"sqlite:///{tmp_path}/hive.db", create=False)
        assert isinstance(hive.storage, SqliteStorage) and hive.storage.create is False


_NEVER_CLOSED = """
import asyncio, sys, workhive

async def main():
    hive = await workhive.open(sys.argv[1]).open()  # never closed
    pool = hive.pool("p")
    await pool.push_many(range(300))  # over INLINE_MAX: runs on aiosqlite's thread
    item = await pool.claim("w")
    await pool.complete(item, "ok")
    await pool.stats()  # the thread again
    print("ran", flush=True)

asyncio.run(main())
"""


@pytest.mark.asyncio
async def test_a_hive_never_closed_does_not_hang_the_program_at_exit_and_keeps_its_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hive.db"
    # A generous limit: a hang is unbounded; a loaded machine is merely slow.
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", _NEVER_CLOSED, url], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ran"), done.stderr
    async with workhive.open(url, create=False) as hive:
        stats = await hive.pool("p").stats()
        assert (stats.pending, stats.done) == (299, 1)


# -- passwords in mistyped URLs, options given twice (issue 24) ---------------------------------
@pytest.mark.parametrize("char", ["@", "?", "#", "/", ":"])
def test_a_password_in_a_mistyped_url_is_never_shown(char: str) -> None:
    password = f"ssCANARY1{char}ssCANARY2{char}ssCANARY3"
    for url in (
        f"sqlite://user:{password}@host/hive.db",
        f"sqlite://user:{password}@host/hive.db?journal=wal",
        f"sqlite:user:{password}@host/hive.db",
    ):
        for make in (SqliteStorage, lambda u: workhive.open(u)):
            with pytest.raises(ConfigError) as info:
                make(url)
            for text in (str(info.value), repr(info.value), repr(vars(info.value))):
                assert "CANARY" not in text, text


@pytest.mark.parametrize(
    "query", ["synchronous=full&synchronous=off", "busy_timeout=1&synchronous=full&busy_timeout=2"]
)
def test_an_option_given_twice_is_refused_naming_it_and_no_file_is_made(tmp_path: Path, query: str) -> None:
    name = query.split("=", 1)[0]
    url = f"sqlite:///{tmp_path}/sub/hive.db?{query}"

    async def main() -> None:
        with pytest.raises(ConfigError, match=f"gives '{name}' twice: give each option once"):
            async with workhive.open(url) as hive:
                await hive.pool("jobs").push("x")

    asyncio.run(main())
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_factory_option_is_a_config_error_naming_it_and_no_file_is_made(tmp_path: Path) -> None:
    # Rule F1, checked by the core from the options the plugin declares (it was a TypeError).
    with pytest.raises(ConfigError, match=r"synchronus.*clock=, create=") as info:
        workhive.open(f"sqlite:///{tmp_path}/hive.db", synchronus="full")
    assert "URL's query" in str(info.value)  # where ?synchronous= belongs
    assert not (tmp_path / "hive.db").exists()
