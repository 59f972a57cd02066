"""conftest for flatmachines' own persistence tests, copied beside them at test time by test_sdist_persistence.

flatmachines' tests build ``MemoryBackend()``, ``LocalFileBackend(base_dir=…)``
and ``SQLiteCheckpointBackend(db_path=…)`` by name, from
``flatmachines.persistence`` (``test_persistence.py``) or relatively, as
``..persistence`` (``test_persistence_prune.py``, which lives inside the
package in the sdist). Before they are imported, this file replaces the three
names in ``flatmachines.persistence`` by hive-backed stand-ins taking the same
arguments, and makes ``<this package>.persistence`` that same module, so the
tests run unchanged against ``WorkhivePersistence`` on the engine named by
``WHFM_ENGINE`` (memory, sqlite, postgres, redis), each backend a fresh hive
of its own as each of flatmachines' is a fresh store.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import flatmachines.persistence as persistence
from engines import Place

from workhive_flatmachines import WorkhivePersistence

ENGINE = os.environ["WHFM_ENGINE"]
_places: list[Place] = []


def _fresh(directory: Path | None = None) -> Place:
    place = Place(ENGINE, directory if directory is not None else Path(tempfile.mkdtemp(dir=os.environ["WHFM_TMP"])))
    _places.append(place)
    return place


def _open(place: Place) -> WorkhivePersistence:
    return WorkhivePersistence(place.url, **place.options)


class HiveMemoryBackend(WorkhivePersistence):
    """``MemoryBackend()``: an empty hive of its own."""

    def __init__(self) -> None:
        place = _fresh()
        super().__init__(place.url, **place.options)


class HiveLocalFileBackend(WorkhivePersistence):
    """``LocalFileBackend(base_dir)``: a hive of its own (a file under base_dir on SQLite)."""

    def __init__(self, base_dir: str = ".checkpoints") -> None:
        Path(base_dir).mkdir(parents=True, exist_ok=True)
        place = _fresh(Path(base_dir))
        super().__init__(place.url, **place.options)


class HiveSQLiteCheckpointBackend(WorkhivePersistence):
    """``SQLiteCheckpointBackend(db_path)``: a hive of its own (a file beside db_path on SQLite)."""

    def __init__(self, db_path: str, **_: Any) -> None:
        place = _fresh(Path(db_path).parent)
        super().__init__(place.url, **place.options)


persistence.MemoryBackend = HiveMemoryBackend  # type: ignore[misc]
persistence.LocalFileBackend = HiveLocalFileBackend  # type: ignore[misc]
persistence.SQLiteCheckpointBackend = HiveSQLiteCheckpointBackend  # type: ignore[misc]
sys.modules[f"{__package__}.persistence"] = persistence


def pytest_sessionfinish() -> None:
    # How many hive-backed stand-ins the run built: the caller checks the tests really used them.
    (Path(os.environ["WHFM_TMP"]) / "hives-built").write_text(str(len(_places)))
    for place in _places:
        place.clean()
