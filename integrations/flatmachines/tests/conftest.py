"""Fixtures: the adapter on each workhive backend, and flatmachines' own backends as the reference."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from engines import ENGINES, Place, require
from flatmachines.distributed import (
    MemoryRegistrationBackend,
    MemoryWorkBackend,
    SQLiteRegistrationBackend,
    SQLiteWorkBackend,
)

from workhive_flatmachines import HiveHandle, WorkhiveRegistrationBackend, WorkhiveWorkBackend

#: workhive backends the adapter runs on here (postgres/redis join when their plugins exist)
WORKHIVE_BACKENDS = ("memory", "sqlite")
#: the implementations every shared behaviour is checked on: flatmachines' own, then the adapter
IMPLEMENTATIONS = ("flatmachines-memory", "flatmachines-sqlite", "workhive-memory", "workhive-sqlite")


def storage_url(backend: str, tmp_path: Path) -> str:
    if backend == "memory":
        return f"memory://flatmachines-{uuid.uuid4().hex}"
    return f"sqlite:///{tmp_path / 'hive.db'}"


class Backends:
    """A work backend and a registration backend of one implementation, sharing one store."""

    def __init__(self, impl: str, tmp_path: Path) -> None:
        self.impl = impl
        self.is_workhive = impl.startswith("workhive")
        self.handle: HiveHandle | None = None
        if impl == "flatmachines-memory":
            self.work, self.registry = MemoryWorkBackend(), MemoryRegistrationBackend()
        elif impl == "flatmachines-sqlite":
            db = str(tmp_path / "flatmachines.sqlite")
            self.work, self.registry = SQLiteWorkBackend(db_path=db), SQLiteRegistrationBackend(db_path=db)
        else:
            self.handle = HiveHandle(storage_url(impl.split("-")[1], tmp_path))
            self.work = WorkhiveWorkBackend(self.handle)
            self.registry = WorkhiveRegistrationBackend(self.handle)

    async def close(self) -> None:
        if self.handle is not None:
            await self.handle.aclose()


@pytest_asyncio.fixture(params=IMPLEMENTATIONS)
async def backends(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backends]:
    b = Backends(request.param, tmp_path)
    yield b
    await b.close()


@pytest_asyncio.fixture(params=WORKHIVE_BACKENDS)
async def handle(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HiveHandle]:
    h = HiveHandle(storage_url(request.param, tmp_path))
    yield h
    await h.aclose()


@pytest.fixture(params=ENGINES)
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    """A hive of this test's own on each engine (postgres/redis skip when their server is absent)."""
    require(request.param)
    where = Place(request.param, tmp_path)
    yield where
    where.clean()
